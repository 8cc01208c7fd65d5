package e2e

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// More copies than nodes: the pod the scheduler cannot place stays Pending, and within 30 s the
// job's status and an Event say why, in the scheduler's words.
func testTooFewNodesIsExplainedWithin30s(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-too-few")
	job := example(t, "fashion-mnist-ha")
	set(job, "metadata/name", "seven")
	set(job, "spec/roles/parameterServer/replicas", int64(7))
	createJob(t, ns, job)
	took := eventually(t, 30*time.Second, "an Unschedulable condition naming the scheduler's reason", func() (bool, string) {
		status, _, msg := condition(getJob(t, ns, "seven"), "Unschedulable")
		return status == "True" && strings.Contains(msg, "anti-affinity"), status + " " + msg
	})
	var since time.Time
	for _, p := range jobPods(t, ns, "seven", "ps") {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				since = c.LastTransitionTime.Time
			}
		}
	}
	if ok, why := hasEvent(t, ns, "seven", "Unschedulable", "anti-affinity"); !ok {
		t.Errorf("no Unschedulable event: %s", why)
	}
	if phase(getJob(t, ns, "seven")) != "Pending" {
		t.Errorf("phase %s, want Pending", phase(getJob(t, ns, "seven")))
	}
	t.Logf("Unschedulable reported %v after the job was created (the scheduler's verdict at %v)", took.Round(time.Millisecond), since.Format(time.RFC3339))
	kubectl(t, "delete", "adamjob", "seven", "-n", ns, "--wait=false")
}

// Pod faults on a running HA job: a parameter server deleted, a trainer that crashes, an
// eviction through the API, a kubelet's eviction, and a node removed. Each pod is replaced;
// only the crash counts against backoffLimit; a conflicting status write loses no count.
func TestPodFaultsAreRepairedUnderTheRunPolicy(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-faults")
	job := example(t, "fashion-mnist-ha")
	set(job, "metadata/name", "faults")
	set(job, "spec/runPolicy", map[string]any{"backoffLimit": int64(5)})
	createJob(t, ns, job)
	waitPhase(t, ns, "faults", "Running", 90*time.Second)
	restarts := func() int64 { return statusInt(getJob(t, ns, "faults"), "restarts") }
	replaced := func(name string, old types.UID) {
		t.Helper()
		readyPod(t, ns, name, old, 90*time.Second)
	}
	uid := func(name string) types.UID {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.UID
	}

	// A parameter server deleted (kubectl delete pod): recreated under its name, not counted.
	old := uid("faults-ps-1")
	kubectl(t, "delete", "pod", "faults-ps-1", "-n", ns, "--wait=false")
	replaced("faults-ps-1", old)
	if r := restarts(); r != 0 {
		t.Errorf("a deleted pod counted as %d restarts", r)
	}

	// A trainer crashes (exit 137) while something else keeps updating the job (conflicting
	// status writes): replaced, counted exactly once.
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; !stop.Load(); i++ {
			_, _, _ = run("", "kubectl", "annotate", "--overwrite", "adamjob/faults", "-n", ns, fmt.Sprintf("e2e/touch=%d", i))
		}
	}()
	old = uid("faults-trainer-1")
	exitPod(t, ns, "faults-trainer-1", 137, "")
	replaced("faults-trainer-1", old)
	stop.Store(true)
	<-done
	eventually(t, 10*time.Second, "one restart", func() (bool, string) { return restarts() == 1, fmt.Sprint(restarts()) })
	if ok, why := hasEvent(t, ns, "faults", "PodFailed", "exit code 137"); !ok {
		t.Errorf("no PodFailed event: %s", why)
	}

	// It crashes again at once: counted, and its pod made again only once the role's back-off
	// (the operator's --restart-backoff) has passed, which the status and an event say.
	old = uid("faults-trainer-1")
	exitPod(t, ns, "faults-trainer-1", 1, "")
	var after string
	eventually(t, 10*time.Second, "the trainers' back-off in the status", func() (bool, string) {
		after, _, _ = unstructured.NestedString(getJob(t, ns, "faults").Object, "status", "roles", "trainer", "createAfter")
		return after != "", fmt.Sprint(getJob(t, ns, "faults").Object["status"])
	})
	replaced("faults-trainer-1", old)
	until, err := time.Parse(time.RFC3339, after)
	if err != nil {
		t.Fatalf("status.roles.trainer.createAfter %q: %v", after, err)
	}
	if p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "faults-trainer-1", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if p.CreationTimestamp.Time.Before(until) {
		t.Errorf("the crashed trainer came back at %v, before its back-off ended at %v", p.CreationTimestamp.Time, until)
	} else {
		t.Logf("the trainer's second crash: back-off until %v (%v), the pod made again at %v", until.Format(time.RFC3339), restartBackoff, p.CreationTimestamp.Format(time.RFC3339))
	}
	if ok, why := hasEvent(t, ns, "faults", "BackOff", "role trainer failed 2 times in a row"); !ok {
		t.Errorf("no BackOff event: %s", why)
	}
	eventually(t, 10*time.Second, "two restarts", func() (bool, string) { return restarts() == 2, fmt.Sprint(restarts()) })

	// An eviction through the API (kubectl drain's way): the pod goes, is replaced, not counted.
	old = uid("faults-trainer-0")
	err = env.cs.PolicyV1().Evictions(ns).Evict(ctx(), &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: "faults-trainer-0", Namespace: ns}})
	if err != nil {
		t.Fatalf("evict: %v", err)
	}
	replaced("faults-trainer-0", old)

	// Preemption by the real scheduler: a pod of a higher priority that needs a whole node takes
	// the node of a trainer; what ran there is replaced elsewhere, not counted.
	victim0, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "faults-trainer-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	preempt(t, ns, victim0.Spec.NodeName)
	replaced("faults-trainer-1", victim0.UID)

	// The kubelet evicts a pod (node pressure): Failed with DisruptionTarget; not counted.
	old = uid("faults-data-server-0")
	exitPod(t, ns, "faults-data-server-0", 137, "Evicted", corev1.PodCondition{
		Type: "DisruptionTarget", Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", LastTransitionTime: metav1.Now()})
	replaced("faults-data-server-0", old)
	if ok, why := hasEvent(t, ns, "faults", "PodDisrupted", "faults-data-server-0"); !ok {
		t.Errorf("no PodDisrupted event: %s", why)
	}

	// A node removed: the pod garbage collector takes its pods, the operator replaces them
	// elsewhere; not counted.
	victim, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "faults-ps-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := env.cs.CoreV1().Nodes().Get(ctx(), victim.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.cs.CoreV1().Nodes().Delete(ctx(), node.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	took := eventually(t, 150*time.Second, "the lost node's parameter server replaced", func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "faults-ps-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.UID != victim.UID && p.Spec.NodeName != "" && p.Spec.NodeName != node.Name && podReady(p), "on " + p.Spec.NodeName
	})
	t.Logf("a parameter server on a removed node was replaced %v after the node went", took.Round(time.Second))
	restoreNode(t, node)
	waitPhase(t, ns, "faults", "Running", 90*time.Second)
	if r := restarts(); r != 2 {
		t.Errorf("%d restarts after two crashes and five faults the cluster caused, want 2", r)
	}
	kubectl(t, "delete", "adamjob", "faults", "-n", ns, "--wait=false")
}

// preempt has the real scheduler preempt every pod on `node`: a pod of a higher priority that
// needs all of the node's CPUs, placed there. It is removed again when the test ends.
func preempt(t *testing.T, ns, node string) {
	t.Helper()
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high"}, Value: 1000000}
	if _, err := env.cs.SchedulingV1().PriorityClasses().Create(ctx(), pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	n, err := env.cs.CoreV1().Nodes().Get(ctx(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "e2e-preemptor", Namespace: ns},
		Spec: corev1.PodSpec{
			PriorityClassName: "e2e-high",
			NodeSelector:      map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "c", Image: "none", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: n.Status.Allocatable[corev1.ResourceCPU]}}}},
		},
	}
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cs.CoreV1().Pods(ns).Delete(ctx(), "e2e-preemptor", metav1.DeleteOptions{})
		_ = env.cs.SchedulingV1().PriorityClasses().Delete(ctx(), "e2e-high", metav1.DeleteOptions{})
	})
	eventually(t, 60*time.Second, "the preemptor running on "+node, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "e2e-preemptor", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning, string(p.Status.Phase)
	})
}

// restoreNode creates a removed fake node again, as it was.
func restoreNode(t *testing.T, node *corev1.Node) {
	t.Helper()
	fresh := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node.Name, Labels: node.Labels, Annotations: map[string]string{
		"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
		Status: corev1.NodeStatus{Allocatable: node.Status.Allocatable, Capacity: node.Status.Capacity}}
	if _, err := env.cs.CoreV1().Nodes().Create(ctx(), fresh, metav1.CreateOptions{}); err != nil {
		t.Fatalf("restore node %s: %v", node.Name, err)
	}
	kubectl(t, "wait", "--for=condition=Ready", "node/"+node.Name, "--timeout=60s")
}
