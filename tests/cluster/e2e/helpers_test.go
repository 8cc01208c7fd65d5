// Package e2e tests Adam's operator, chart and CRD against a real control plane: the kube-apiserver,
// controller manager and scheduler that tests/cluster/cluster.sh starts, with kwok playing the
// kubelets. Nothing here stands in for Kubernetes; the tests play only the parts kwok does not (a
// container's exit code, written to the pod's status as a kubelet would) and the faults.
//
// Run by `make k8s-e2e` (tests/cluster/e2e.sh), which starts a cluster and sets:
//
//	ADAM_CLUSTER_DIR  the cluster's folder (its env file, pids, logs)
//	ADAM_BINARY       the adam binary (the operator runs as a host process)
//	ADAM_SOURCE_DIR   the repository (charts/, examples/, tests/operator/bad-manifests.yaml)
//	ADAM_E2E_LOGS     where operator logs go
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"adam.dev/tests/cluster/clusterenv"
)

// The cluster and repository the tests run against, read once by TestMain.
type environment struct {
	root       string            // the repository
	bin        string            // kubectl, helm, ... of the pinned releases
	clusterDir string            // cluster.sh's folder
	kubeconfig string            // the admin's
	adam       string            // the adam binary
	logs       string            // operator logs
	vars       map[string]string // cluster.sh env
	cfg        *rest.Config
	cs         *kubernetes.Clientset
	dyn        dynamic.Interface
}

var env environment

var adamJobs = clusterenv.AdamJobs

const (
	operatorNamespace = clusterenv.OperatorNamespace
	release           = clusterenv.Release
)

func loadEnvironment() error {
	env.clusterDir = os.Getenv("ADAM_CLUSTER_DIR")
	env.adam = os.Getenv("ADAM_BINARY")
	env.root = os.Getenv("ADAM_SOURCE_DIR")
	env.logs = os.Getenv("ADAM_E2E_LOGS")
	if env.clusterDir == "" || env.adam == "" || env.root == "" {
		return fmt.Errorf("set ADAM_CLUSTER_DIR, ADAM_BINARY and ADAM_SOURCE_DIR (make k8s-e2e does)")
	}
	if env.logs == "" {
		env.logs = filepath.Join(env.clusterDir, "logs")
	}
	if err := os.MkdirAll(env.logs, 0o755); err != nil {
		return err
	}
	c, err := clusterenv.Load(env.clusterDir)
	if err != nil {
		return err
	}
	env.vars, env.kubeconfig, env.bin = c.Vars, c.Kubeconfig, c.Bin
	env.cfg, env.cs, env.dyn = c.Config, c.Clientset, c.Dynamic
	return nil
}

func ctx() context.Context { return context.Background() }

// run runs a command of the cluster's tools with the admin's kubeconfig; stdin may be "".
func run(stdin string, name string, args ...string) (string, string, error) {
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

func kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, errs, err := run("", "kubectl", args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

func helm(t testing.TB, args ...string) string {
	t.Helper()
	out, errs, err := run("", "helm", args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, errs)
	}
	return out
}

// eventually polls f every 100 ms until it holds or `timeout` passes; the failure names `what`
// and f's last explanation.
func eventually(t testing.TB, timeout time.Duration, what string, f func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, why := f()
		if ok {
			return time.Since(start)
		}
		last = why
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v (last: %s)", what, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func namespace(t testing.TB, name string) string {
	t.Helper()
	_, err := env.cs.CoreV1().Namespaces().Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", name, err)
	}
	return name
}

// example reads examples/NAME.yaml as an object; `edit` changes it before it is returned.
func example(t testing.TB, name string) map[string]any {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(env.root, "examples", name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(text, &obj); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return obj
}

// set writes value at a slash path ("spec/roles/trainer/replicas"), making maps on the way.
func set(obj map[string]any, path string, value any) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	m := obj
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	if value == nil {
		delete(m, parts[len(parts)-1])
	} else {
		m[parts[len(parts)-1]] = value
	}
}

func createJob(t testing.TB, ns string, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	u.SetNamespace(ns)
	got, err := env.dyn.Resource(adamJobs).Namespace(ns).Create(ctx(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create AdamJob %s/%s: %v", ns, u.GetName(), err)
	}
	return got
}

func getJob(t testing.TB, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := env.dyn.Resource(adamJobs).Namespace(ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get AdamJob %s/%s: %v", ns, name, err)
	}
	return u
}

func phase(u *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return p
}

// condition returns a job condition's status, reason and message ("" when absent).
func condition(u *unstructured.Unstructured, kind string) (string, string, string) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == kind {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
		}
	}
	return "", "", ""
}

func statusInt(u *unstructured.Unstructured, path ...string) int64 {
	v, _, _ := unstructured.NestedInt64(u.Object, append([]string{"status"}, path...)...)
	return v
}

func waitPhase(t testing.TB, ns, name, want string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("AdamJob %s/%s phase %s", ns, name, want), func() (bool, string) {
		u := getJob(t, ns, name)
		return phase(u) == want, "phase " + phase(u)
	})
}

// jobPods lists the job's pods (not those being deleted), optionally of one role.
func jobPods(t testing.TB, ns, job, role string) []corev1.Pod {
	t.Helper()
	sel := "adam.dev/job=" + job
	if role != "" {
		sel += ",adam.dev/role=" + role
	}
	list, err := env.cs.CoreV1().Pods(ns).List(ctx(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyPod waits until pod `name` exists, is not being deleted, is Ready and has a uid other
// than `old` ("" for any): a replaced pod comes back under its name with a new uid. It returns
// the pod.
func readyPod(t testing.TB, ns, name string, old types.UID, timeout time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	what := name + " Ready"
	if old != "" {
		what = name + " replaced and Ready"
	}
	eventually(t, timeout, what, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		return p.UID != old && p.DeletionTimestamp == nil && podReady(p), "uid " + string(p.UID) + " phase " + string(p.Status.Phase)
	})
	return pod
}

// exitPod plays the kubelet when a pod's only container exits: phase Succeeded for code 0, else
// Failed, with the container's exit code and any extra pod conditions (DisruptionTarget, ...).
func exitPod(t testing.TB, ns, name string, code int32, reason string, extra ...corev1.PodCondition) {
	t.Helper()
	eventually(t, 10*time.Second, "status of pod "+name, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(ns).Get(ctx(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.Reason = reason
		p.Status.Conditions = append(p.Status.Conditions, extra...)
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodReady || p.Status.Conditions[i].Type == corev1.ContainersReady {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
			p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: code, Reason: map[bool]string{true: "Completed", false: "Error"}[code == 0], FinishedAt: now}}
		}
		_, err = env.cs.CoreV1().Pods(ns).UpdateStatus(ctx(), p, metav1.UpdateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// events lists the reasons and messages of the Events about a job.
func jobEvents(t testing.TB, ns, job string) []corev1.Event {
	t.Helper()
	list, err := env.cs.CoreV1().Events(ns).List(ctx(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + job})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func hasEvent(t testing.TB, ns, job, reason, substr string) (bool, string) {
	var seen []string
	for _, e := range jobEvents(t, ns, job) {
		if e.Reason == reason && strings.Contains(e.Message, substr) {
			return true, ""
		}
		seen = append(seen, e.Reason)
	}
	return false, "events: " + strings.Join(seen, ", ")
}

// ---- the operator, as a host process --------------------------------------------------------

type operator struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	port    int
	done    chan struct{}
	exit    error
	mu      sync.Mutex
}

var portRe = regexp.MustCompile(`endpoints on port (\d+)`)

// startOperator runs `adam operator` with the chart ServiceAccount's kubeconfig (so the chart's
// RBAC is what it works with), its metrics on a free port, and `args` after the defaults.
func startOperator(t testing.TB, name string, args ...string) *operator {
	t.Helper()
	return startOperatorWith(t, name, []string{"--kubeconfig", saKubeconfig}, nil, args...)
}

// The operators' --restart-backoff in these tests (the chart's default is 10s).
const restartBackoff = 2 * time.Second

func startOperatorWith(t testing.TB, name string, auth []string, extraEnv []string, args ...string) *operator {
	t.Helper()
	o := &operator{name: name, logPath: filepath.Join(env.logs, "operator-"+name+".log"), done: make(chan struct{})}
	full := append([]string{"operator"}, auth...)
	// A back-off of 2 s rather than 10 between a role's failures, which several tests make in a row.
	full = append(full, "--metrics-bind-address", "127.0.0.1:0", "--leader-election-namespace", operatorNamespace,
		"--leader-election-id", release+"-operator", "--restart-backoff", restartBackoff.String())
	full = append(full, args...)
	o.cmd = exec.Command(env.adam, full...)
	// No $KUBECONFIG unless a test gives one: the operator must use what it is told.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBECONFIG=") {
			o.cmd.Env = append(o.cmd.Env, e)
		}
	}
	o.cmd.Env = append(append(o.cmd.Env, "ADAM_POD_NAME="+name), extraEnv...)
	f, err := os.Create(o.logPath)
	if err != nil {
		t.Fatal(err)
	}
	o.cmd.Stdout, o.cmd.Stderr = f, f
	if err := o.cmd.Start(); err != nil {
		t.Fatalf("start operator %s: %v", name, err)
	}
	go func() {
		err := o.cmd.Wait()
		f.Close()
		o.mu.Lock()
		o.exit = err
		o.mu.Unlock()
		close(o.done)
	}()
	eventually(t, 20*time.Second, "operator "+name+" serving its endpoints", func() (bool, string) {
		if m := portRe.FindStringSubmatch(o.log()); m != nil {
			o.port, _ = strconv.Atoi(m[1])
			return true, ""
		}
		if o.exited() {
			return false, "exited: " + o.log()
		}
		return false, "no port in its log yet"
	})
	return o
}

func (o *operator) log() string {
	b, _ := os.ReadFile(o.logPath)
	return string(b)
}

func (o *operator) exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

func (o *operator) signal(sig syscall.Signal) { _ = o.cmd.Process.Signal(sig) }

// kill is kill -9.
func (o *operator) kill() {
	o.signal(syscall.SIGKILL)
	<-o.done
}

// stop is SIGTERM and a wait; a Leader gives its Lease up.
func (o *operator) stop() {
	if o.exited() {
		return
	}
	o.signal(syscall.SIGCONT)
	o.signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(20 * time.Second):
		o.kill()
	}
}

// metric sums the samples of `name` whose labels include every `labels` pair ("k=\"v\"").
func (o *operator) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", o.port))
	if err != nil {
		t.Fatalf("operator %s metrics: %v", o.name, err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		v, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		sum += v
	}
	return sum
}

var logTime = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z) `)

// logLine waits for a line containing `substr` and returns its time stamp.
func (o *operator) logLine(t testing.TB, substr string, timeout time.Duration) time.Time {
	t.Helper()
	var at time.Time
	eventually(t, timeout, fmt.Sprintf("operator %s logging %q", o.name, substr), func() (bool, string) {
		for _, line := range strings.Split(o.log(), "\n") {
			if strings.Contains(line, substr) {
				if m := logTime.FindStringSubmatch(line); m != nil {
					at, _ = time.Parse(time.RFC3339Nano, m[1])
				}
				return true, ""
			}
		}
		return false, "not yet"
	})
	return at
}

// noForbidden fails when the operator was refused a call (a permission the chart lacks).
func (o *operator) noForbidden(t testing.TB) {
	t.Helper()
	if n := o.metric(t, "rest_client_requests_total", `code="403"`); n > 0 {
		t.Errorf("operator %s was refused %v API calls (403): the chart's RBAC lacks a permission; see %s", o.name, n, o.logPath)
	}
}
