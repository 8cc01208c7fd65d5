package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// spec.podTemplate and a role's own reach every pod as the real API server admits them: the
// priority admission resolves the class to its value, the service account is the one named,
// the trainers' nodeSelector keeps the real scheduler to one zone; Adam's labels, env, volumes
// and non-root user stay.
func testPodTemplatesReachEveryPodAndTheScheduler(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-template")
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-template"}, Value: 4242}
	if _, err := env.cs.SchedulingV1().PriorityClasses().Create(ctx(), pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	defer func() { _ = env.cs.SchedulingV1().PriorityClasses().Delete(ctx(), pc.Name, metav1.DeleteOptions{}) }()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "trainer-sa"}}
	if _, err := env.cs.CoreV1().ServiceAccounts(ns).Create(ctx(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zones := map[string]string{}
	nodes, err := env.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("nodes: %v", err)
	}
	for _, n := range nodes.Items {
		zones[n.Name] = n.Labels["topology.kubernetes.io/zone"]
	}
	zone := zones[nodes.Items[0].Name]

	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "templated")
	set(job, "spec/podTemplate", map[string]any{
		"labels":             map[string]any{"team": "vision"},
		"annotations":        map[string]any{"example.com/owner": "ml"},
		"priorityClassName":  "e2e-template",
		"serviceAccountName": "trainer-sa",
		"tolerations":        []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"}},
		"env":                []any{map[string]any{"name": "TZ", "value": "UTC"}},
		"volumes":            []any{map[string]any{"name": "cache", "emptyDir": map[string]any{}}},
		"volumeMounts":       []any{map[string]any{"name": "cache", "mountPath": "/cache"}},
		"securityContext":    map[string]any{"runAsUser": int64(2000)},
	})
	set(job, "spec/roles/trainer/podTemplate", map[string]any{
		"nodeSelector": map[string]any{"topology.kubernetes.io/zone": zone},
	})
	createJob(t, ns, job)
	waitPhase(t, ns, "templated", "Running", 90*time.Second)
	eventually(t, 60*time.Second, "both trainers scheduled", func() (bool, string) {
		n := 0
		for _, p := range jobPods(t, ns, "templated", "trainer") {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n == 2, fmt.Sprintf("%d scheduled", n)
	})
	pods := jobPods(t, ns, "templated", "")
	if len(pods) < 5 {
		t.Fatalf("%d pods, want 5", len(pods))
	}
	for _, p := range pods {
		role := p.Labels["adam.dev/role"]
		c := p.Spec.Containers[0]
		env := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = true
		}
		mounts := map[string]bool{}
		for _, m := range c.VolumeMounts {
			mounts[m.MountPath] = true
		}
		sc := p.Spec.SecurityContext
		switch {
		case p.Labels["team"] != "vision" || p.Labels["adam.dev/job"] != "templated" || p.Annotations["example.com/owner"] != "ml":
			t.Errorf("%s: labels %v annotations %v", p.Name, p.Labels, p.Annotations)
		case p.Spec.Priority == nil || *p.Spec.Priority != 4242:
			t.Errorf("%s: priority %v, want 4242 from the PriorityClass", p.Name, p.Spec.Priority)
		case p.Spec.ServiceAccountName != "trainer-sa" || len(p.Spec.Tolerations) == 0:
			t.Errorf("%s: service account %q, tolerations %v", p.Name, p.Spec.ServiceAccountName, p.Spec.Tolerations)
		case !env["TZ"] || !env["ADAM_POD_NAME"] || !mounts["/cache"] || !mounts["/etc/adam"]:
			t.Errorf("%s: env %v mounts %v", p.Name, env, mounts)
		case sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 2000 || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
			t.Errorf("%s: securityContext %+v, want user 2000 and runAsNonRoot", p.Name, sc)
		}
		if role == "trainer" && zones[p.Spec.NodeName] != zone {
			t.Errorf("%s on node %s in zone %s, want zone %s (nodeSelector)", p.Name, p.Spec.NodeName, zones[p.Spec.NodeName], zone)
		}
		if role != "trainer" && p.Spec.NodeSelector != nil {
			t.Errorf("%s: nodeSelector %v, want the trainers' only", p.Name, p.Spec.NodeSelector)
		}
	}
	kubectl(t, "delete", "adamjob", "templated", "-n", ns, "--wait=false")
}

// sidecarExit plays the kubelet when Adam's container of a pod ends while an injected sidecar
// (a service mesh's proxy) runs on: the pod stays Running.
func sidecarExit(t testing.TB, ns, name string, code int32) {
	t.Helper()
	eventually(t, 10*time.Second, "status of pod "+name, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		adam := p.Spec.Containers[0].Name
		p.Status.Phase = corev1.PodRunning
		p.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: adam, Image: p.Spec.Containers[0].Image, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], FinishedAt: metav1.Now()}}},
			{Name: "mesh-proxy", Image: "proxy:1", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}},
		}
		if _, err := env.cs.CoreV1().Pods(ns).UpdateStatus(ctx(), p, metav1.UpdateOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// A sidecar that never exits does not keep a trainer's pod from counting as finished: the job
// reads Adam's container. Its failure counts as a failure (the pod is replaced, a restart
// counted) though the pod is still Running; its success finishes the job.
func testASidecarDoesNotKeepTheJobFromFinishing(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-sidecar")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "sidecar")
	createJob(t, ns, job)
	waitPhase(t, ns, "sidecar", "Running", 90*time.Second)
	eventually(t, 60*time.Second, "both trainers", func() (bool, string) {
		return len(jobPods(t, ns, "sidecar", "trainer")) == 2, ""
	})
	old, err := env.cs.CoreV1().Pods(ns).Get(ctx(), "sidecar-trainer-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sidecarExit(t, ns, "sidecar-trainer-1", 1)
	uid := readyPod(t, ns, "sidecar-trainer-1", old.UID, 60*time.Second).UID
	if n := statusInt(getJob(t, ns, "sidecar"), "restarts"); n != 1 {
		t.Errorf("restarts %d after a failure beside a sidecar, want 1", n)
	}
	for _, p := range jobPods(t, ns, "sidecar", "trainer") {
		if p.UID == uid || p.Name != "sidecar-trainer-1" {
			sidecarExit(t, ns, p.Name, 0)
		}
	}
	waitPhase(t, ns, "sidecar", "Succeeded", 60*time.Second)
	kubectl(t, "delete", "adamjob", "sidecar", "-n", ns, "--wait=false")
}

// spec.roles.trainer.failureRules decide what a failed trainer means, first match first: an
// exit code the user calls harmless is replaced without counting, a pod condition the user
// calls fatal fails the job at once; anything else counts against backoffLimit as before.
func testFailureRulesDecideWhatAFailedPodMeans(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-rules")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "rules")
	set(job, "spec/roles/trainer/failureRules", []any{
		map[string]any{"action": "Ignore", "onExitCodes": map[string]any{"operator": "In", "values": []any{int64(137)}}},
		map[string]any{"action": "FailJob", "onPodConditions": []any{map[string]any{"type": "ConfigIssue"}}},
	})
	createJob(t, ns, job)
	waitPhase(t, ns, "rules", "Running", 90*time.Second)
	trainer0 := readyPod(t, ns, "rules-trainer-0", "", 60*time.Second)

	// Exit 137, matched by rule 0 (Ignore): replaced, no restart counted.
	exitPod(t, ns, "rules-trainer-0", 137, "")
	again := readyPod(t, ns, "rules-trainer-0", trainer0.UID, 60*time.Second)
	eventually(t, 30*time.Second, "a PodFailureIgnored event naming the rule", func() (bool, string) {
		return hasEvent(t, ns, "rules", "PodFailureIgnored", "spec.roles.trainer.failureRules[0]: Ignore")
	})
	// The same failure again is not a second Event but a series of 2 on the first (events.k8s.io,
	// as Kubernetes' own recorder writes a repeat).
	exitPod(t, ns, "rules-trainer-0", 137, "")
	readyPod(t, ns, "rules-trainer-0", again.UID, 60*time.Second)
	eventually(t, 30*time.Second, "the PodFailureIgnored event as a series of 2", func() (bool, string) {
		list, err := env.cs.EventsV1().Events(ns).List(ctx(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var counts []string
		for _, e := range list.Items {
			if e.Reason == "PodFailureIgnored" && e.Regarding.Name == "rules" {
				n := int32(1)
				if e.Series != nil {
					n = e.Series.Count
				}
				counts = append(counts, fmt.Sprintf("%d (%s)", n, e.ReportingController))
			}
		}
		return len(counts) == 1 && counts[0] == "2 (adam.dev/operator)", "PodFailureIgnored events: " + strings.Join(counts, ", ")
	})
	if n := statusInt(getJob(t, ns, "rules"), "restarts"); n != 0 {
		t.Errorf("restarts %d after two ignored failures, want 0", n)
	}

	// Exit 1, matched by no rule: counted.
	p1 := readyPod(t, ns, "rules-trainer-1", "", 60*time.Second)
	exitPod(t, ns, "rules-trainer-1", 1, "")
	readyPod(t, ns, "rules-trainer-1", p1.UID, 60*time.Second)
	eventually(t, 30*time.Second, "one restart counted", func() (bool, string) {
		n := statusInt(getJob(t, ns, "rules"), "restarts")
		return n == 1, fmt.Sprint(n)
	})

	// Exit 1 with the ConfigIssue condition, matched by rule 1 (FailJob): the job fails at once.
	exitPod(t, ns, "rules-trainer-1", 1, "", corev1.PodCondition{Type: "ConfigIssue", Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()})
	waitPhase(t, ns, "rules", "Failed", 60*time.Second)
	if status, reason, msg := condition(getJob(t, ns, "rules"), "Failed"); status != "True" || reason != "FailureRule" ||
		!strings.Contains(msg, "spec.roles.trainer.failureRules[1]: FailJob") {
		t.Errorf("Failed condition %s %s %q, want FailureRule naming failureRules[1]", status, reason, msg)
	}
	kubectl(t, "delete", "adamjob", "rules", "-n", ns, "--wait=false")
}

// `kubectl scale aj/NAME --replicas=N` changes a running job's trainers through the scale
// subresource: trainer pods are created and deleted, the manifest every role reads (the job's
// ConfigMap, which the data server and parameter servers follow) says N, and the subresource
// reports the count and the selector a HorizontalPodAutoscaler needs. A sync job refuses it.
func testKubectlScaleChangesTheTrainers(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-scale")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "elastic")
	createJob(t, ns, job)
	waitPhase(t, ns, "elastic", "Running", 90*time.Second)
	trainers := func() []string { return livePodNames(t, ns, "elastic", "trainer") }
	says := func(n int) (bool, string) { return manifestSays(ns, "elastic", n, "trainer") }
	for _, n := range []int{4, 1} {
		kubectl(t, "scale", "-n", ns, "adamjob/elastic", fmt.Sprintf("--replicas=%d", n))
		eventually(t, 60*time.Second, fmt.Sprintf("%d trainer pods", n), func() (bool, string) {
			names := trainers()
			return len(names) == n, fmt.Sprint(names)
		})
		eventually(t, 30*time.Second, fmt.Sprintf("the manifest saying %d trainers", n), func() (bool, string) { return says(n) })
		eventually(t, 30*time.Second, "the scale subresource", func() (bool, string) {
			out := kubectl(t, "get", "--raw", "/apis/adam.dev/v1alpha1/namespaces/"+ns+"/adamjobs/elastic/scale")
			var sc struct {
				Spec   struct{ Replicas int }
				Status struct {
					Replicas int
					Selector string
				}
			}
			if err := json.Unmarshal([]byte(out), &sc); err != nil {
				return false, err.Error()
			}
			return sc.Spec.Replicas == n && sc.Status.Replicas == n &&
				sc.Status.Selector == "adam.dev/job=elastic,adam.dev/role=trainer", out
		})
	}
	kubectl(t, "delete", "adamjob", "elastic", "-n", ns, "--wait=false")

	sync := example(t, "fashion-mnist")
	set(sync, "metadata/name", "lockstep")
	set(sync, "spec/training/consistency", "sync")
	createJob(t, ns, sync)
	_, stderr, err := run("", "kubectl", "scale", "-n", ns, "adamjob/lockstep", "--replicas=3")
	if err == nil || !strings.Contains(stderr, "changes only with spec.training.consistency async") {
		t.Errorf("scaling a sync job: err %v, stderr %q; want it refused naming consistency", err, stderr)
	}
	kubectl(t, "delete", "adamjob", "lockstep", "-n", ns, "--wait=false")
}

// Elastic parameter servers: with copies > 1, editing spec.roles.parameterServer.replicas of a
// running job adds server pods (and their volumes), and the manifest every role follows (the
// job's ConfigMap: the controller moves copies by it) says the new count. Lowered, the servers
// above it keep running until they retire (they exit 0 once the controller has moved their
// copies, played here by the test), and only then go. Without copies the count stays immutable.
func testEditingTheServerCountAddsAndRetiresServers(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-servers")
	job := example(t, "fashion-mnist-ha")
	set(job, "metadata/name", "grow")
	createJob(t, ns, job)
	waitPhase(t, ns, "grow", "Running", 90*time.Second)
	servers := func() []string { return livePodNames(t, ns, "grow", "ps") }
	says := func(n int) (bool, string) { return manifestSays(ns, "grow", n, "parameterServer") }
	patch := func(n int) {
		kubectl(t, "patch", "-n", ns, "adamjob/grow", "--type=merge", "-p",
			fmt.Sprintf(`{"spec":{"roles":{"parameterServer":{"replicas":%d}}}}`, n))
	}

	patch(4)
	eventually(t, 60*time.Second, "4 parameter servers", func() (bool, string) {
		names := servers()
		return len(names) == 4 && names[3] == "grow-ps-3", fmt.Sprint(names)
	})
	eventually(t, 30*time.Second, "the manifest saying 4 servers", func() (bool, string) { return says(4) })
	if _, err := env.cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx(), "grow-ps-3-state", metav1.GetOptions{}); err != nil {
		t.Errorf("no volume for the new server: %v", err)
	}
	readyPod(t, ns, "grow-ps-3", "", 90*time.Second)

	patch(3)
	eventually(t, 30*time.Second, "the manifest saying 3 servers", func() (bool, string) { return says(3) })
	// Still holding copies: it stays while the controller moves them.
	time.Sleep(3 * time.Second) // a few reconciles: what is checked is that nothing happens
	if names := servers(); len(names) != 4 {
		t.Errorf("a leaving server was deleted before it retired: %v", names)
	}
	exitPod(t, ns, "grow-ps-3", 0, "")
	eventually(t, 60*time.Second, "the retired server gone", func() (bool, string) {
		names := servers()
		return len(names) == 3, fmt.Sprint(names)
	})
	if phase, _, _ := unstructured.NestedString(getJob(t, ns, "grow").Object, "status", "phase"); phase != "Running" {
		t.Errorf("the job is %q after a server retired", phase)
	}
	kubectl(t, "delete", "adamjob", "grow", "-n", ns, "--wait=false")

	plain := example(t, "fashion-mnist")
	set(plain, "metadata/name", "fixed")
	createJob(t, ns, plain)
	_, stderr, err := run("", "kubectl", "patch", "-n", ns, "adamjob/fixed", "--type=merge", "-p",
		`{"spec":{"roles":{"parameterServer":{"replicas":3}}}}`)
	if err == nil || !strings.Contains(stderr, "changes only with spec.roles.parameterServer.copies > 1") {
		t.Errorf("changing the servers of a job without copies: err %v, stderr %q; want it refused naming copies", err, stderr)
	}
	kubectl(t, "delete", "adamjob", "fixed", "-n", ns, "--wait=false")
}

// manifestSays reports whether the job's ConfigMap (the manifest its pods follow) gives `role`
// n replicas.
func manifestSays(ns, job string, n int, role string) (bool, string) {
	cm, err := env.cs.CoreV1().ConfigMaps(ns).Get(ctx(), job+"-job", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["job.yaml"]), &m); err != nil {
		return false, err.Error()
	}
	got, _, _ := unstructured.NestedFieldNoCopy(m, "spec", "roles", role, "replicas")
	return fmt.Sprint(got) == fmt.Sprint(n), fmt.Sprintf("job.yaml says %v", got)
}

// livePodNames lists the names of a job's pods of `role` that are not being deleted, sorted.
func livePodNames(t testing.TB, ns, job, role string) []string {
	var names []string
	for _, p := range jobPods(t, ns, job, role) {
		if p.DeletionTimestamp == nil {
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return names
}
