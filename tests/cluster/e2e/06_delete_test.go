package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const hold = "e2e.adam.dev/hold"

// holdPod keeps a pod from going away (a finalizer, as an unreachable node's pod stays
// Terminating); release lets it go.
func holdPod(t *testing.T, ns, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"finalizers":["%s"]}}`, hold)
	if _, err := env.cs.CoreV1().Pods(ns).Patch(ctx(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func releasePod(t *testing.T, ns, name string) {
	t.Helper()
	_, err := env.cs.CoreV1().Pods(ns).Patch(ctx(), name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	if err != nil && !isNotFound(err) {
		t.Fatal(err)
	}
}

func jobGone(t *testing.T, ns, name string) (bool, string) {
	_, err := env.dyn.Resource(adamJobs).Namespace(ns).Get(ctx(), name, metav1.GetOptions{})
	if isNotFound(err) {
		return true, ""
	}
	return false, fmt.Sprint(err)
}

// kubectl delete: the flush finalizer lets the parameter servers go first, then the real
// garbage collector removes every object the job owned; the StatefulSet's Raft volumes go with
// it, the parameter servers' checkpoint claims stay for a job of the same name.
func testDeleteFlushesThenTheGarbageCollectorTakesTheRest(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-delete")
	job := example(t, "fashion-mnist-ha")
	set(job, "metadata/name", "gone")
	createJob(t, ns, job)
	waitPhase(t, ns, "gone", "Running", 90*time.Second)
	kubectl(t, "delete", "adamjob", "gone", "-n", ns, "--timeout=60s")
	eventually(t, 60*time.Second, "every owned object collected", func() (bool, string) {
		var left []string
		for key := range ownedObjects(t, ns, "gone") {
			if !strings.HasPrefix(key, "persistentvolumeclaims/gone-ps-") {
				left = append(left, key)
			}
		}
		claims, _ := env.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx(), metav1.ListOptions{})
		for _, c := range claims.Items {
			if strings.HasPrefix(c.Name, "state-gone-controller-") {
				left = append(left, "claim "+c.Name)
			}
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	claims, _ := env.cs.CoreV1().PersistentVolumeClaims(ns).List(ctx(), metav1.ListOptions{LabelSelector: "adam.dev/job=gone,adam.dev/role=ps"})
	if len(claims.Items) != 3 {
		t.Errorf("%d checkpoint claims left, want the 3 parameter servers'", len(claims.Items))
	}
}

// A parameter server stuck terminating holds the job's deletion for flushTimeoutSeconds, then
// the finalizer goes with a warning.
func testAStuckParameterServerHoldsTheDeletionOnlyUntilTheFlushTimeout(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-stuck")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "stuck")
	set(job, "spec/runPolicy", map[string]any{"flushTimeoutSeconds": int64(5)})
	createJob(t, ns, job)
	waitPhase(t, ns, "stuck", "Running", 90*time.Second)
	holdPod(t, ns, "stuck-ps-0")
	defer releasePod(t, ns, "stuck-ps-0")
	kubectl(t, "delete", "adamjob", "stuck", "-n", ns, "--wait=false")
	time.Sleep(3 * time.Second)
	if gone, _ := jobGone(t, ns, "stuck"); gone {
		t.Fatal("the job went before its parameter server flushed or the timeout passed")
	}
	took := eventually(t, 30*time.Second, "the job deleted after flushTimeoutSeconds", func() (bool, string) { return jobGone(t, ns, "stuck") })
	t.Logf("deleted %v after the first 3 s", took.Round(time.Millisecond))
	if ok, why := hasEvent(t, ns, "stuck", "FlushTimedOut", "stuck-ps-0"); !ok {
		t.Errorf("no FlushTimedOut warning: %s", why)
	}
}

// A job deleted and created again under the same name while its predecessor's pod is still
// terminating: the new job does not take that pod for its own, and makes its own once it goes.
func testARecreatedJobDoesNotAdoptItsPredecessorsObjects(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-recreate")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "again")
	createJob(t, ns, job)
	waitPhase(t, ns, "again", "Running", 90*time.Second)
	holdPod(t, ns, "again-trainer-0")
	defer releasePod(t, ns, "again-trainer-0")
	kubectl(t, "delete", "adamjob", "again", "-n", ns, "--timeout=60s")
	job = example(t, "fashion-mnist")
	set(job, "metadata/name", "again")
	second := createJob(t, ns, job)
	// Everything but trainer-0 is made anew; trainer-0 is still the predecessor's.
	eventually(t, 60*time.Second, "the new job's other pods", func() (bool, string) {
		return len(jobPods(t, ns, "again", "trainer")) == 1 && len(jobPods(t, ns, "again", "ps")) == 2, ""
	})
	time.Sleep(2 * time.Second)
	u := getJob(t, ns, "again")
	if phase(u) == "Running" {
		t.Error("the new job counts its predecessor's dying trainer as its own")
	}
	if ready := statusInt(u, "roles", "trainer", "ready"); ready != 1 {
		t.Errorf("%d trainers ready, want 1 (trainer-0 is the predecessor's)", ready)
	}
	releasePod(t, ns, "again-trainer-0")
	eventually(t, 60*time.Second, "the new job's own trainer-0", func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "again-trainer-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		refs := p.OwnerReferences
		return len(refs) == 1 && refs[0].UID == second.GetUID() && p.Status.Phase == corev1.PodRunning, fmt.Sprint(refs)
	})
	waitPhase(t, ns, "again", "Running", 60*time.Second)
	kubectl(t, "delete", "adamjob", "again", "-n", ns, "--wait=false")
}
