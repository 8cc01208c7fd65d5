// Package nodes tests Adam on real Kubernetes nodes: the kubelets of tests/cluster/cluster.sh's
// node containers run the chart's operator and every job's pods as containers of Adam's image,
// with probes, volumes, cluster DNS and the pod network for real. Nothing here plays a kubelet.
//
// Run by `make k8s-nodes` (tests/cluster/nodes-e2e.sh), which starts such a cluster and sets:
//
//	ADAM_CLUSTER_DIR  the cluster's folder (its env file, logs, node files)
//	ADAM_SOURCE_DIR   the repository (charts/, examples/)
//	ADAM_E2E_LOGS     where the tests leave what they saw
package nodes

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"adam.dev/tests/cluster/clusterenv"
)

type environment struct {
	root, bin, clusterDir, kubeconfig, logs, clusterID string
	cpuManagerNode                                     string // the node whose kubelet pins
	cs                                                 *kubernetes.Clientset
	dyn                                                dynamic.Interface
}

var env environment

var adamJobs = clusterenv.AdamJobs

const (
	operatorNamespace = clusterenv.OperatorNamespace
	release           = clusterenv.Release
)

// The operator's --node-loss-timeout here (the chart's default is 2m).
const nodeLossTimeout = 15 * time.Second

func TestMain(m *testing.M) {
	if err := load(); err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		os.Exit(1)
	}
	start := time.Now()
	// The chart as a user installs it: its operator Deployment (2 replicas, one leader) runs from
	// Adam's image on the real nodes; --wait holds until both pods are ready. Its pods keep off
	// the static CPU manager's node, whose one allocatable CPU a pinned trainer takes whole
	// (TestATrainerOnTheStaticCPUManagersNodeIsPinned). A trainer on a node that stops answering
	// is made again elsewhere 15 s after the node is marked unreachable (nodeLossTimeout).
	if out, errs, err := run("", "helm", "install", release, "charts/adam", "-n", operatorNamespace,
		"--create-namespace", "--wait", "--timeout", "180s", "--set", "nodeLossTimeout="+nodeLossTimeout.String(), "--set-json", fmt.Sprintf(`affinity={"nodeAffinity":
		{"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions":
		[{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": [%q]}]}]}}}`, env.cpuManagerNode)); err != nil {
		fmt.Fprintf(os.Stderr, "nodes: helm install: %v\n%s%s", err, out, errs)
		describe("helm-install")
		os.Exit(1)
	}
	fmt.Printf("nodes: chart installed, its operator pods ready, in %v\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if code != 0 {
		describe("failed")
	}
	os.Exit(code)
}

func load() error {
	env.clusterDir = os.Getenv("ADAM_CLUSTER_DIR")
	env.root = os.Getenv("ADAM_SOURCE_DIR")
	env.logs = os.Getenv("ADAM_E2E_LOGS")
	if env.clusterDir == "" || env.root == "" {
		return fmt.Errorf("set ADAM_CLUSTER_DIR and ADAM_SOURCE_DIR (make k8s-nodes does)")
	}
	if env.logs == "" {
		env.logs = filepath.Join(env.clusterDir, "logs")
	}
	c, err := clusterenv.Load(env.clusterDir)
	if err != nil {
		return err
	}
	if n := c.Vars["ADAM_CLUSTER_REAL_NODES"]; n == "" || n == "0" {
		return fmt.Errorf("the cluster in %s has no real nodes", env.clusterDir)
	}
	env.kubeconfig, env.bin, env.cs, env.dyn = c.Kubeconfig, c.Bin, c.Clientset, c.Dynamic
	env.clusterID, env.cpuManagerNode = c.Vars["ADAM_CLUSTER_ID"], c.Vars["ADAM_CLUSTER_CPU_MANAGER_NODE"]
	return nil
}

func ctx() context.Context { return context.Background() }

// run runs one of the cluster's tools (kubectl, helm) with the admin's kubeconfig.
func run(stdin, name string, args ...string) (string, string, error) {
	cmd := exec.Command(filepath.Join(env.bin, name), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.kubeconfig)
	cmd.Dir = env.root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func kubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errs, err := run(stdin, "kubectl", args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

// nodeContainer is the Docker container of the real node `node` (adam-node-N).
func nodeContainer(node string) string { return "adam-cluster-" + env.clusterID + "-" + node }

// onNode runs a command in a real node's container.
func onNode(t *testing.T, node string, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", append([]string{"exec", nodeContainer(node)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec %s %s: %v\n%s", node, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// describe leaves the cluster's state in the logs: every pod, job and event, as kubectl says.
func describe(name string) {
	var b strings.Builder
	for _, args := range [][]string{
		{"get", "nodes", "-o", "wide"}, {"get", "pods", "-A", "-o", "wide"}, {"get", "aj", "-A", "-o", "yaml"},
		{"describe", "pods", "-A"}, {"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, errs, _ := run("", "kubectl", args...)
		fmt.Fprintf(&b, "$ kubectl %s\n%s%s\n", strings.Join(args, " "), out, errs)
	}
	_ = os.WriteFile(filepath.Join(env.logs, name+"-cluster.txt"), []byte(b.String()), 0o644)
}

// eventually polls `cond` every 500 ms until it holds or `limit` passes; it returns how long it
// took, and fails the test naming `what` when it never held.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return time.Since(start)
}

func job(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	j, err := env.dyn.Resource(adamJobs).Namespace(ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("adamjob %s/%s: %v", ns, name, err)
	}
	return j
}

// waitSucceeded waits for the job's phase Succeeded (failing the test at once on Failed, with
// the Failed condition) and returns its status.
func waitSucceeded(t *testing.T, ns, name string, limit time.Duration) map[string]any {
	t.Helper()
	eventually(t, limit, name+" Succeeded", func() bool {
		phase, _, _ := unstructured.NestedString(job(t, ns, name).Object, "status", "phase")
		if phase == "Failed" {
			t.Fatalf("%s failed: %s", name, condition(t, ns, name, "Failed"))
		}
		return phase == "Succeeded"
	})
	st, _ := job(t, ns, name).Object["status"].(map[string]any)
	return st
}

// condition is "STATUS REASON: MESSAGE" of the job's condition `kind`, "" when it has none.
func condition(t *testing.T, ns, name, kind string) string {
	t.Helper()
	conds, _, _ := unstructured.NestedSlice(job(t, ns, name).Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == kind {
			return fmt.Sprintf("%v %v: %v", m["status"], m["reason"], m["message"])
		}
	}
	return ""
}

// jobEvents are the messages of the events about the job with `reason`.
func jobEvents(t *testing.T, ns, name, reason string) []string {
	t.Helper()
	list, err := env.cs.CoreV1().Events(ns).List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("events in %s: %v", ns, err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "AdamJob" && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

func podsOf(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	list, err := env.cs.CoreV1().Pods(ns).List(ctx(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("pods %s in %s: %v", selector, ns, err)
	}
	return list.Items
}
