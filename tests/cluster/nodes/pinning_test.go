package nodes

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A trainer given a whole CPU (a Guaranteed pod) on the node whose kubelet runs the static CPU
// manager gets a core of its own: read from inside the pod, its cpuset is one CPU that is not
// the reserved CPU 0, and the job says CpuPinned True. Its parameter server and data server,
// on the other nodes (no static CPU manager), share their node's cores.
func TestATrainerOnTheStaticCPUManagersNodeIsPinned(t *testing.T) {
	const ns, name = "default", "pinned"
	node := env.cpuManagerNode
	j := example(t, "fashion-mnist", name, ns)
	set(j, 3, "spec", "training", "epochs")
	set(j, map[string]any{"replicas": 1, "threads": 1, "resources": map[string]any{"cpu": "1", "memory": "1Gi"},
		"podTemplate": map[string]any{"nodeSelector": map[string]any{"kubernetes.io/hostname": node}}},
		"spec", "roles", "trainer")
	set(j, map[string]any{"replicas": 1, "shardBytes": 262144, "resources": map[string]any{"cpu": "1", "memory": "1Gi"}},
		"spec", "roles", "parameterServer")
	set(j, map[string]any{"replicas": 1, "resources": map[string]any{"cpu": "1", "memory": "1Gi"}}, "spec", "roles", "dataServer")
	apply(t, j)
	defer kubectl(t, "", "delete", "aj", name, "--wait=false")
	var cond string
	took := eventually(t, 3*time.Minute, "CpuPinned True", func() bool {
		phase, _, _ := unstructured.NestedString(job(t, ns, name).Object, "status", "phase")
		if phase == "Failed" || phase == "Succeeded" {
			t.Fatalf("the job is %s before its trainer said it was pinned: %s", phase, condition(t, ns, name, "CpuPinned"))
		}
		cond = condition(t, ns, name, "CpuPinned")
		return strings.HasPrefix(cond, "True ")
	})
	t.Logf("after %v: CpuPinned %s", took.Round(time.Second), cond)
	trainer := name + "-trainer-0"
	status := kubectl(t, "", "exec", "-n", ns, trainer, "--", "cat", "/proc/1/status")
	var cpus string
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			cpus = strings.TrimSpace(v)
		}
	}
	t.Logf("%s on %s: Cpus_allowed_list %q", trainer, node, cpus)
	if cpus == "" || strings.ContainsAny(cpus, ",-") || cpus == "0" {
		t.Errorf("%s's cpuset is %q, want one CPU of its own (not the reserved CPU 0)", trainer, cpus)
	}
	for _, p := range podsOf(t, ns, "adam.dev/job="+name+",adam.dev/role=ps") {
		if p.Spec.NodeName == node {
			t.Errorf("%s ran on %s, where only the trainer fits", p.Name, node)
		}
	}
}
