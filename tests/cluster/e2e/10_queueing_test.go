package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// Kueue, built from its Go module at the pinned version (tests/cluster/kueue), runs as it does on
// a cluster: in a container (made here from its static binary alone, on the host's network),
// with its CRDs, and its webhooks for its own kinds registered with the API server by URL (no
// Service routes to a host process). Its configuration names AdamJob as an external framework,
// as a cluster that runs Adam under Kueue must.

var (
	workloads       = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloads"}
	clusterQueues   = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "clusterqueues"}
	localQueues     = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "localqueues"}
	resourceFlavors = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "resourceflavors"}

	workloadPriorityClasses = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "workloadpriorityclasses"}
	admissionChecks         = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "admissionchecks"}
	topologies              = schema.GroupVersionResource{Group: "kueue.x-k8s.io", Version: "v1beta2", Resource: "topologies"}
)

const kueueContainer = "adam-e2e-kueue"

// Kueue's waitForPodsReady: an admitted job whose Workload is not PodsReady this long after its
// admission is evicted (the operator must say when its pods are ready).
const podsReadyTimeout = 15 * time.Second

// onHost runs a command of this machine's (docker, tar), not of the cluster's tools.
func onHost(stdin []byte, name string, args ...string) (string, string, error) {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// servingCertificate writes tls.crt and tls.key for 127.0.0.1 into dir, signed by the cluster's
// CA (which the API server is then given as the webhooks' caBundle), and returns the CA's PEM.
func servingCertificate(t testing.TB, dir string) []byte {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(env.clusterDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(env.clusterDir, "pki", "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode(caPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if caBlock == nil || keyBlock == nil {
		t.Fatal("the cluster CA's files are not PEM")
	}
	ca, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	caKey, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		if caKey, err = x509.ParseECPrivateKey(keyBlock.Bytes); err != nil {
			t.Fatalf("the cluster CA's key: %v", err)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "kueue-webhook"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	certOut := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyOut := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certOut, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), keyOut, 0o644); err != nil {
		t.Fatal(err)
	}
	return caPEM
}

// kueueWebhooks registers Kueue's own webhooks (those on kueue.x-k8s.io kinds, from its
// manifests) at https://127.0.0.1:port; the webhooks of the kinds it integrates (pods,
// deployments, ...) are left out, so that the rest of the suite never depends on Kueue running.
// Mutating and validating configurations have the same shape here, so both are read as
// unstructured objects.
func kueueWebhooks(t testing.TB, port int, caPEM []byte) func() {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(filepath.Dir(env.bin), "kueue", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ours := func(webhook map[string]any) bool {
		rules, _, _ := unstructured.NestedSlice(webhook, "rules")
		for _, r := range rules {
			groups, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "apiGroups")
			for _, g := range groups {
				if g == "kueue.x-k8s.io" {
					return true
				}
			}
		}
		return false
	}
	resources := map[string]string{
		"MutatingWebhookConfiguration":   "mutatingwebhookconfigurations",
		"ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
	}
	var made []func()
	for _, doc := range strings.Split(string(text), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		resource, ok := resources[u.GetKind()]
		if !ok {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(obj, "webhooks")
		var keep []any
		for _, h := range hooks {
			w := h.(map[string]any)
			if !ours(w) {
				continue
			}
			path, _, _ := unstructured.NestedString(w, "clientConfig", "service", "path")
			w["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, path),
				"caBundle": base64.StdEncoding.EncodeToString(caPEM),
			}
			keep = append(keep, w)
		}
		u.Object["metadata"] = map[string]any{"name": kueueContainer + "-" + resource}
		u.Object["webhooks"] = keep
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: resource}
		if _, err := env.dyn.Resource(gvr).Create(ctx(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s with Kueue's webhooks: %v", u.GetKind(), err)
		}
		made = append(made, func() { _ = env.dyn.Resource(gvr).Delete(ctx(), u.GetName(), metav1.DeleteOptions{}) })
	}
	if len(made) != 2 {
		t.Fatalf("Kueue's manifests gave %d webhook configurations, want 2", len(made))
	}
	return func() {
		for _, f := range made {
			f()
		}
	}
}

// startKueue installs Kueue's CRDs, runs Kueue and registers its webhooks; the returned
// function stops it and keeps its log in the e2e logs.
func startKueue(t testing.TB) func() {
	t.Helper()
	start := time.Now()
	files, err := filepath.Glob(filepath.Join(filepath.Dir(env.bin), "kueue", "kueue.x-k8s.io_*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Kueue CRDs beside %s (tests/cluster/build.sh puts them there): %v", env.bin, err)
	}
	args := []string{"apply", "--server-side", "--force-conflicts"}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	kubectl(t, args...)
	eventually(t, 60*time.Second, "Kueue's CRDs established", func() (bool, string) {
		// A CRD's status may not be written yet, which `kubectl wait` takes for an error.
		out, errs, err := run("", "kubectl", "wait", "--for", "condition=Established", "--timeout", "10s",
			"crd/workloads.kueue.x-k8s.io", "crd/clusterqueues.kueue.x-k8s.io",
			"crd/localqueues.kueue.x-k8s.io", "crd/resourceflavors.kueue.x-k8s.io")
		return err == nil, out + errs
	})
	namespace(t, "kueue-system")

	dir := filepath.Join(env.logs, "kueue")
	certs := filepath.Join(dir, "certs")
	caPEM := servingCertificate(t, certs)
	webhook, metrics, health := freePort(t), freePort(t), freePort(t)
	config := fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health: {healthProbeBindAddress: "127.0.0.1:%d"}
metrics: {bindAddress: "127.0.0.1:%d"}
webhook: {host: 127.0.0.1, port: %d, certDir: %q}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
integrations:
  frameworks: ["batch/job"]
  externalFrameworks: ["AdamJob.v1alpha1.adam.dev"]
waitForPodsReady: {timeout: %s}
`, health, metrics, webhook, certs, podsReadyTimeout)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	docker := func(stdin []byte, args ...string) string {
		t.Helper()
		out, errs, err := onHost(stdin, "docker", args...)
		if err != nil {
			t.Fatalf("docker %s: %v\n%s%s", strings.Join(args, " "), err, out, errs)
		}
		return out
	}
	_, _, _ = onHost(nil, "docker", "rm", "-f", kueueContainer)
	// An image of the binary alone: nothing to pull, and Kueue needs nothing else.
	tarball, errs, err := onHost(nil, "tar", "-C", env.bin, "-cf", "-", "kueue")
	if err != nil {
		t.Fatalf("tar of %s/kueue: %v %s", env.bin, err, errs)
	}
	docker([]byte(tarball), "import", "-", kueueContainer+":local")
	// With its own certificate management off, Kueue reads its metrics certificate from a fixed
	// path in its container.
	docker(nil, "run", "-d", "--name", kueueContainer, "--network", "host",
		"-e", "KUBECONFIG="+env.kubeconfig,
		"-v", env.clusterDir+":"+env.clusterDir+":ro", "-v", dir+":"+dir+":ro",
		"-v", certs+":/etc/kueue/metrics/certs:ro",
		kueueContainer+":local", "/kueue", "--config", filepath.Join(dir, "config.yaml"),
		// The visibility API server would want certificates of its own (an APIService); elastic
		// jobs' Workload slices are alpha.
		"--feature-gates", "VisibilityOnDemand=false,ElasticJobsViaWorkloadSlices=true")
	stop := func() {
		out, errs, _ := onHost(nil, "docker", "logs", kueueContainer)
		_ = os.WriteFile(filepath.Join(env.logs, "kueue.log"), []byte(out+errs), 0o644)
		_, _, _ = onHost(nil, "docker", "rm", "-f", kueueContainer)
	}
	eventually(t, 60*time.Second, "Kueue ready", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		if err != nil {
			state, _, _ := onHost(nil, "docker", "inspect", "-f", "{{.State.Status}}", kueueContainer)
			if strings.TrimSpace(state) == "exited" {
				stop()
				t.Fatalf("Kueue exited; see %s", filepath.Join(env.logs, "kueue.log"))
			}
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	unregister := kueueWebhooks(t, webhook, caPEM)
	fmt.Printf("e2e: Kueue up with its CRDs and webhooks in %v\n", time.Since(start).Round(time.Millisecond))
	return func() {
		unregister()
		stop()
	}
}

func localQueue(name, clusterQueue string) string {
	return fmt.Sprintf("apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: %s}\nspec: {clusterQueue: %s}\n", name, clusterQueue)
}

// zoneOneQueue makes ClusterQueue `name`: room for one job (8 CPUs, 32 GiB) on flavor zone-1,
// with `extra` in its spec.
func zoneOneQueue(t testing.TB, name, extra string) {
	t.Helper()
	apply(t, clusterQueues, "", fmt.Sprintf(`
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: %s}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: zone-1
      resources:
      - {name: cpu, nominalQuota: 8}
      - {name: memory, nominalQuota: 32Gi}
  %s`, name, extra))
}

func apply(t testing.TB, gvr schema.GroupVersionResource, ns string, text string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(text), &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	var err error
	if ns == "" {
		_, err = env.dyn.Resource(gvr).Create(ctx(), u, metav1.CreateOptions{})
	} else {
		_, err = env.dyn.Resource(gvr).Namespace(ns).Create(ctx(), u, metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s %s: %v", gvr.Resource, u.GetName(), err)
	}
}

// workloadOf returns the job's Workload (nil while there is none).
func workloadOf(t testing.TB, ns, job string) *unstructured.Unstructured {
	t.Helper()
	list, err := env.dyn.Resource(workloads).Namespace(ns).List(ctx(), metav1.ListOptions{LabelSelector: "adam.dev/job=" + job})
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() == nil {
			return &list.Items[i]
		}
	}
	return nil
}

func queuedJob(t testing.TB, ns, name string, labels ...string) {
	t.Helper()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", name)
	l := map[string]any{"kueue.x-k8s.io/queue-name": "team"}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	set(job, "metadata/labels", l)
	createJob(t, ns, job)
}

// A ClusterQueue with room for one job of five CPUs, not two: the second job makes no pod while
// the first runs (no half-placed job), and runs once the first has finished; a Workload Kueue
// deactivates is stopped and given back, and runs again when reactivated. Pods land on the
// nodes of the flavor Kueue assigned. A third job, on a ClusterQueue with an admission check,
// waits for the check and carries what it gives (provisionedByACheck).
func TestKueueAdmitsAJobWholeOrNotAtAll(t *testing.T) {
	stopShared(t)
	helm(t, "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values",
		"--set", "kueue.enabled=true", "--wait", "--timeout", "60s")
	defer helm(t, "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values",
		"--set", "kueue.enabled=false", "--wait", "--timeout", "60s")
	stopKueue := startKueue(t)
	defer stopKueue()
	o := startOperator(t, "kueue", "--kueue")
	defer o.stop()
	o.logLine(t, "now leads", 30*time.Second)

	ns := namespace(t, "e2e-kueue")
	apply(t, resourceFlavors, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: zone-1}
spec: {nodeLabels: {topology.kubernetes.io/zone: zone-1}}`)
	zoneOneQueue(t, "e2e-cq", "")
	apply(t, localQueues, ns, localQueue("team", "e2e-cq"))
	defer func() {
		_ = env.dyn.Resource(localQueues).Namespace(ns).Delete(ctx(), "team", metav1.DeleteOptions{})
		_ = env.dyn.Resource(clusterQueues).Delete(ctx(), "e2e-cq", metav1.DeleteOptions{})
		_ = env.dyn.Resource(resourceFlavors).Delete(ctx(), "zone-1", metav1.DeleteOptions{})
	}()
	eventually(t, 30*time.Second, "ClusterQueue e2e-cq active", func() (bool, string) {
		cq, err := env.dyn.Resource(clusterQueues).Get(ctx(), "e2e-cq", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		// The finalizer only Kueue's mutating webhook adds: the API server reaches it.
		if fin := cq.GetFinalizers(); len(fin) != 1 || fin[0] != "kueue.x-k8s.io/resource-in-use" {
			t.Fatalf("ClusterQueue finalizers %v: Kueue's webhook was not called", fin)
		}
		conds, _, _ := unstructured.NestedSlice(cq.Object, "status", "conditions")
		return fmt.Sprint(conds) != "[]" && strings.Contains(fmt.Sprint(conds), "type:Active") &&
			strings.Contains(fmt.Sprint(conds), "status:True"), fmt.Sprint(conds)
	})

	apply(t, workloadPriorityClasses, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: e2e-high}
value: 100`)
	defer func() {
		_ = env.dyn.Resource(workloadPriorityClasses).Delete(ctx(), "e2e-high", metav1.DeleteOptions{})
	}()

	queuedJob(t, ns, "first")
	admitted := time.Now()
	waitPhase(t, ns, "first", "Running", 90*time.Second)
	eventually(t, 30*time.Second, "the first job's Workload PodsReady", func() (bool, string) {
		st, reason := workloadCondition(workloadOf(t, ns, "first"), "PodsReady")
		return st == "True" && reason == "PodsReady", st + " " + reason
	})
	queuedJob(t, ns, "second", "kueue.x-k8s.io/priority-class", "e2e-high")
	eventually(t, 30*time.Second, "the second job queued for want of quota", func() (bool, string) {
		u := getJob(t, ns, "second")
		st, _, msg := condition(u, "Admitted")
		return phase(u) == "Queued" && st == "False" && strings.Contains(msg, "quota"), phase(u) + " " + st + " " + msg
	})
	// Pods of the first only, all on zone-1's nodes; none of the second's, for a while.
	for _, p := range jobPods(t, ns, "first", "") {
		node, err := env.cs.CoreV1().Nodes().Get(ctx(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s on node %q: %v", p.Name, p.Spec.NodeName, err)
		}
		if z := node.Labels["topology.kubernetes.io/zone"]; z != "zone-1" || p.Spec.NodeSelector["topology.kubernetes.io/zone"] != "zone-1" {
			t.Errorf("pod %s on %s in %s with nodeSelector %v; the flavor puts it in zone-1", p.Name, node.Name, z, p.Spec.NodeSelector)
		}
	}
	wl := workloadOf(t, ns, "first")
	if cq, _, _ := unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue"); cq != "e2e-cq" {
		t.Errorf("the first job's Workload admitted to %q, want e2e-cq", cq)
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if n := len(jobPods(t, ns, "second", "")); n > 0 {
			t.Fatalf("the queued job made %d pods", n)
		}
	}
	// The second waits with its class's priority, as Kueue's own integrations submit it.
	w2 := workloadOf(t, ns, "second")
	if p, _, _ := unstructured.NestedInt64(w2.Object, "spec", "priority"); p != 100 {
		t.Errorf("the second job's Workload has priority %d, want e2e-high's 100", p)
	}
	if ref, _, _ := unstructured.NestedString(w2.Object, "spec", "priorityClassRef", "name"); ref != "e2e-high" {
		t.Errorf("the second job's Workload names priority class %q, want e2e-high", ref)
	}
	// Past waitForPodsReady's timeout the first still runs: Kueue saw its pods ready.
	if wait := time.Until(admitted.Add(podsReadyTimeout + 3*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	if st, reason := workloadCondition(workloadOf(t, ns, "first"), "Evicted"); st == "True" {
		t.Fatalf("Kueue evicted the running first job (%s)", reason)
	}
	if p := phase(getJob(t, ns, "first")); p != "Running" {
		t.Fatalf("the first job is %s past waitForPodsReady's timeout, want Running", p)
	}

	// The first finishes: its Workload is Finished, its quota free, and the second runs.
	finished := time.Now()
	for _, p := range jobPods(t, ns, "first", "trainer") {
		exitPod(t, ns, p.Name, 0, "")
	}
	waitPhase(t, ns, "first", "Succeeded", 60*time.Second)
	eventually(t, 30*time.Second, "the first job's Workload Finished", func() (bool, string) {
		st, _ := workloadCondition(workloadOf(t, ns, "first"), "Finished")
		return st == "True", st
	})
	waitPhase(t, ns, "second", "Running", 90*time.Second)
	fmt.Printf("e2e: the second job ran %v after the first's trainers ended\n", time.Since(finished).Round(time.Millisecond))

	// Deactivated by Kueue: pods gone, the quota given back; reactivated, it runs again.
	wl = workloadOf(t, ns, "second")
	patch := []byte(`{"spec":{"active":false}}`)
	if _, err := env.dyn.Resource(workloads).Namespace(ns).Patch(ctx(), wl.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the deactivated job stopped and its quota given back", func() (bool, string) {
		u := getJob(t, ns, "second")
		w := workloadOf(t, ns, "second")
		_, reserved, _ := unstructured.NestedMap(w.Object, "status", "admission")
		n := len(jobPods(t, ns, "second", ""))
		return phase(u) == "Queued" && n == 0 && !reserved, fmt.Sprintf("phase %s, %d pods, admission %v", phase(u), n, reserved)
	})
	if ok, why := hasEvent(t, ns, "second", "Evicted", "Kueue evicted"); !ok {
		t.Error("no Evicted event:", why)
	}
	patch = []byte(`{"spec":{"active":true}}`)
	if _, err := env.dyn.Resource(workloads).Namespace(ns).Patch(ctx(), wl.GetName(), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "second", "Running", 90*time.Second)

	provisionedByACheck(t, ns)
	placedByTopology(t, ns)
	resizedInPlace(t, ns)

	// One controller runs a job from start to end.
	u := getJob(t, ns, "second")
	set(u.Object, "spec/runPolicy/managedBy", "kueue.x-k8s.io/multikueue")
	if _, err := env.dyn.Resource(adamJobs).Namespace(ns).Update(ctx(), u, metav1.UpdateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "spec.runPolicy.managedBy: is immutable") {
		t.Errorf("changing spec.runPolicy.managedBy: %v; want refused as immutable", err)
	}
	o.noForbidden(t)
	for _, name := range []string{"first", "second"} {
		_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), name, metav1.DeleteOptions{})
	}
	eventually(t, 60*time.Second, "the jobs and their Workloads gone", func() (bool, string) {
		list, err := env.dyn.Resource(workloads).Namespace(ns).List(ctx(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d Workloads", len(list.Items))
	})
}

// An admission check on a second ClusterQueue, its controller played here as a
// ProvisioningRequest controller acts: Kueue admits the job only once the check is Ready, and
// what the check gives the trainers' pod set (a label, an annotation, a nodeSelector, a
// toleration) is on the trainers' pods and on no other's.
func provisionedByACheck(t *testing.T, ns string) {
	t.Helper()
	now := time.Now().UTC().Format(time.RFC3339)
	apply(t, admissionChecks, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: e2e-provision}
spec: {controllerName: adam.dev/e2e-provision}`)
	active := fmt.Sprintf(`{"status":{"conditions":[{"type":"Active","status":"True","reason":"Active",`+
		`"message":"the e2e test answers","lastTransitionTime":%q}]}}`, now)
	if _, err := env.dyn.Resource(admissionChecks).Patch(ctx(), "e2e-provision", types.MergePatchType, []byte(active), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	zoneOneQueue(t, "e2e-checked", "admissionChecksStrategy: {admissionChecks: [{name: e2e-provision}]}")
	apply(t, localQueues, ns, localQueue("checked", "e2e-checked"))
	defer func() {
		_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), "third", metav1.DeleteOptions{})
		eventually(t, 60*time.Second, "the third job's Workload gone", func() (bool, string) {
			return workloadOf(t, ns, "third") == nil, "still there"
		})
		_ = env.dyn.Resource(localQueues).Namespace(ns).Delete(ctx(), "checked", metav1.DeleteOptions{})
		_ = env.dyn.Resource(clusterQueues).Delete(ctx(), "e2e-checked", metav1.DeleteOptions{})
		_ = env.dyn.Resource(admissionChecks).Delete(ctx(), "e2e-provision", metav1.DeleteOptions{})
	}()
	queuedJob(t, ns, "third", "kueue.x-k8s.io/queue-name", "checked")
	var name string
	eventually(t, 60*time.Second, "the third job's quota reserved, its check pending", func() (bool, string) {
		w := workloadOf(t, ns, "third")
		if w == nil {
			return false, "no Workload"
		}
		name = w.GetName()
		_, reserved, _ := unstructured.NestedMap(w.Object, "status", "admission")
		checks, _, _ := unstructured.NestedSlice(w.Object, "status", "admissionChecks")
		return reserved && strings.Contains(fmt.Sprint(checks), "state:Pending"), fmt.Sprintf("admission %v, checks %v", reserved, checks)
	})
	if n := len(jobPods(t, ns, "third", "")); n > 0 || phase(getJob(t, ns, "third")) != "Queued" {
		t.Fatalf("the third job is %s with %d pods while its check is pending", phase(getJob(t, ns, "third")), n)
	}
	ready := fmt.Sprintf(`{"status":{"admissionChecks":[{"name":"e2e-provision","state":"Ready",`+
		`"message":"provisioned","lastTransitionTime":%q,"podSetUpdates":[{"name":"trainer",`+
		`"labels":{"example.com/provisioned":"yes"},"annotations":{"example.com/request":"third"},`+
		`"nodeSelector":{"type":"kwok"},`+
		`"tolerations":[{"key":"example.com/provisioned","operator":"Exists","effect":"NoSchedule"}]}]}]}}`,
		time.Now().UTC().Format(time.RFC3339))
	if _, err := env.dyn.Resource(workloads).Namespace(ns).Patch(ctx(), name, types.MergePatchType, []byte(ready), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, "third", "Running", 90*time.Second)
	pods := jobPods(t, ns, "third", "")
	trainers := 0
	for _, p := range pods {
		trainer := p.Labels["adam.dev/role"] == "trainer"
		if trainer {
			trainers++
		}
		tolerated := false
		for _, tol := range p.Spec.Tolerations {
			tolerated = tolerated || tol.Key == "example.com/provisioned"
		}
		got := fmt.Sprintf("label %q, annotation %q, nodeSelector %q, toleration %v",
			p.Labels["example.com/provisioned"], p.Annotations["example.com/request"], p.Spec.NodeSelector["type"], tolerated)
		want := `label "", annotation "", nodeSelector "", toleration false`
		if trainer {
			want = `label "yes", annotation "third", nodeSelector "kwok", toleration true`
		}
		if got != want || p.Spec.NodeSelector["topology.kubernetes.io/zone"] != "zone-1" {
			t.Errorf("pod %s: %s, zone %q; want %s, zone-1", p.Name, got, p.Spec.NodeSelector["topology.kubernetes.io/zone"], want)
		}
	}
	if trainers != 2 {
		t.Errorf("%d trainer pods of %d, want 2", trainers, len(pods))
	}
}

// Kueue's topology-aware scheduling, with Kueue's own annotation on the trainers' pod template: a
// ClusterQueue of one TAS flavor over the fake nodes' zones admits the job with a topology
// assignment per pod set, the trainers' pod set asks for one zone (required), and Kueue's
// topology ungater, not the operator, puts each trainer in that zone: the operator made the pods
// gated, labelled with their pod set and annotated with their Workload; the ungater lifted the
// gate and wrote the zone into their nodeSelector; the scheduler placed them there.
func placedByTopology(t *testing.T, ns string) {
	t.Helper()
	const zone = "topology.kubernetes.io/zone"
	apply(t, topologies, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: e2e-zones}
spec: {levels: [{nodeLabel: topology.kubernetes.io/zone}]}`)
	apply(t, resourceFlavors, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: e2e-tas}
spec: {nodeLabels: {type: kwok}, topologyName: e2e-zones}`)
	apply(t, clusterQueues, "", `
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: e2e-tas}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: e2e-tas
      resources:
      - {name: cpu, nominalQuota: 8}
      - {name: memory, nominalQuota: 32Gi}`)
	apply(t, localQueues, ns, localQueue("topology", "e2e-tas"))
	defer func() {
		_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), "fourth", metav1.DeleteOptions{})
		eventually(t, 60*time.Second, "the fourth job's Workload gone", func() (bool, string) {
			return workloadOf(t, ns, "fourth") == nil, "still there"
		})
		_ = env.dyn.Resource(localQueues).Namespace(ns).Delete(ctx(), "topology", metav1.DeleteOptions{})
		_ = env.dyn.Resource(clusterQueues).Delete(ctx(), "e2e-tas", metav1.DeleteOptions{})
		_ = env.dyn.Resource(resourceFlavors).Delete(ctx(), "e2e-tas", metav1.DeleteOptions{})
		_ = env.dyn.Resource(topologies).Delete(ctx(), "e2e-zones", metav1.DeleteOptions{})
	}()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "fourth")
	set(job, "metadata/labels", map[string]any{"kueue.x-k8s.io/queue-name": "topology"})
	set(job, "spec/roles/trainer/podTemplate", map[string]any{
		"annotations": map[string]any{"kueue.x-k8s.io/podset-required-topology": zone}})
	createJob(t, ns, job)
	waitPhase(t, ns, "fourth", "Running", 90*time.Second)

	wl := workloadOf(t, ns, "fourth")
	sets, _, _ := unstructured.NestedSlice(wl.Object, "spec", "podSets")
	assigned, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	for _, ps := range sets {
		if name, _, _ := unstructured.NestedString(ps.(map[string]any), "name"); name == "trainer" {
			if req, _, _ := unstructured.NestedString(ps.(map[string]any), "topologyRequest", "required"); req != zone {
				t.Errorf("the trainers' pod set asks for topology %q, want required %s", req, zone)
			}
		}
	}
	for _, a := range assigned {
		if name, _, _ := unstructured.NestedString(a.(map[string]any), "name"); name == "trainer" {
			if levels, _, _ := unstructured.NestedStringSlice(a.(map[string]any), "topologyAssignment", "levels"); fmt.Sprint(levels) != "["+zone+"]" {
				t.Errorf("the trainers were admitted with topology levels %v, want [%s]", levels, zone)
			}
		}
	}
	zones := map[string]bool{}
	trainers := jobPods(t, ns, "fourth", "trainer")
	for _, p := range trainers {
		node, err := env.cs.CoreV1().Nodes().Get(ctx(), p.Spec.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("trainer %s on node %q: %v", p.Name, p.Spec.NodeName, err)
		}
		zones[node.Labels[zone]] = true
		got := fmt.Sprintf("gates %v, pod set %q, Workload %q, nodeSelector zone %q, node's zone %q",
			p.Spec.SchedulingGates, p.Labels["kueue.x-k8s.io/podset"], p.Annotations["kueue.x-k8s.io/workload"],
			p.Spec.NodeSelector[zone], node.Labels[zone])
		want := fmt.Sprintf("gates [], pod set \"trainer\", Workload %q, nodeSelector zone %q, node's zone %q",
			wl.GetName(), node.Labels[zone], node.Labels[zone])
		if got != want {
			t.Errorf("trainer %s: %s; want %s", p.Name, got, want)
		}
	}
	if len(trainers) != 2 || len(zones) != 1 {
		t.Errorf("%d trainers in zones %v; want 2 in one zone", len(trainers), zones)
	}
	fmt.Printf("e2e: Kueue placed the trainers of a topology-aware job in zone %v\n", zones)
}

// An elastic job (kueue.x-k8s.io/elastic-job) on a ClusterQueue of 8 CPUs, room for one job
// of 5 and not for a second beside it: scaled from 2 trainers to 3, the operator asks for a
// larger Workload slice that Kueue admits counting the admitted Workload's quota as its own
// (5 + 6 CPUs would not fit), and marks the replaced one Finished; scaled to 1, the admitted
// slice's counts are lowered in place. No pod but the trainers added or removed is replaced, and
// the quota Kueue holds is, each time, what the job's pods request.
func resizedInPlace(t *testing.T, ns string) {
	t.Helper()
	zoneOneQueue(t, "e2e-elastic", "")
	apply(t, localQueues, ns, localQueue("elastic", "e2e-elastic"))
	defer func() {
		_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), "fifth", metav1.DeleteOptions{})
		eventually(t, 60*time.Second, "the fifth job's Workloads gone", func() (bool, string) {
			return workloadOf(t, ns, "fifth") == nil, "still there"
		})
		_ = env.dyn.Resource(localQueues).Namespace(ns).Delete(ctx(), "elastic", metav1.DeleteOptions{})
		_ = env.dyn.Resource(clusterQueues).Delete(ctx(), "e2e-elastic", metav1.DeleteOptions{})
	}()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "fifth")
	set(job, "metadata/labels", map[string]any{"kueue.x-k8s.io/queue-name": "elastic"})
	set(job, "metadata/annotations", map[string]any{"kueue.x-k8s.io/elastic-job": "true"})
	createJob(t, ns, job)
	waitPhase(t, ns, "fifth", "Running", 90*time.Second)
	first := workloadOf(t, ns, "fifth").GetName()
	uids := func(role string) map[string]string {
		out := map[string]string{}
		for _, p := range jobPods(t, ns, "fifth", role) {
			out[p.Name] = string(p.UID)
		}
		return out
	}
	before := uids("")
	// The CPUs the job's pods request, and those Kueue holds for it on its ClusterQueue.
	quota := func() (string, string) {
		var requested int64
		for _, p := range jobPods(t, ns, "fifth", "") {
			for _, c := range p.Spec.Containers {
				requested += c.Resources.Requests.Cpu().MilliValue()
			}
		}
		cq, err := env.dyn.Resource(clusterQueues).Get(ctx(), "e2e-elastic", metav1.GetOptions{})
		if err != nil {
			return "", err.Error()
		}
		held := ""
		flavors, _, _ := unstructured.NestedSlice(cq.Object, "status", "flavorsReservation")
		for _, f := range flavors {
			res, _, _ := unstructured.NestedSlice(f.(map[string]any), "resources")
			for _, r := range res {
				if name, _, _ := unstructured.NestedString(r.(map[string]any), "name"); name == "cpu" {
					total, _, _ := unstructured.NestedString(r.(map[string]any), "total")
					q, err := resource.ParseQuantity(total)
					if err == nil {
						held = fmt.Sprint(q.MilliValue())
					}
				}
			}
		}
		return fmt.Sprint(requested), held
	}
	for _, step := range []struct {
		trainers      int
		event, saying string
	}{{3, "Resized", "with the new counts"}, {1, "Resized", "lowered the counts"}} {
		kubectl(t, "scale", "-n", ns, "adamjob/fifth", fmt.Sprintf("--replicas=%d", step.trainers))
		scaled := time.Now()
		eventually(t, 90*time.Second, fmt.Sprintf("%d trainers running", step.trainers), func() (bool, string) {
			n := 0
			for _, p := range jobPods(t, ns, "fifth", "trainer") {
				if podReady(&p) {
					n++
				}
			}
			return n == step.trainers && len(jobPods(t, ns, "fifth", "trainer")) == step.trainers, fmt.Sprint(n, " ready")
		})
		took := time.Since(scaled)
		var requested, held string
		eventually(t, 30*time.Second, "Kueue holding what the pods request", func() (bool, string) {
			requested, held = quota()
			return requested == held, "requested " + requested + "m, held " + held + "m"
		})
		fmt.Printf("e2e: the elastic job ran %d trainers %v after the scale; Kueue holds %s mCPU\n",
			step.trainers, took.Round(time.Millisecond), held)
		if ok, why := hasEvent(t, ns, "fifth", step.event, step.saying); !ok {
			t.Errorf("no %s event %q after scaling to %d: %s", step.event, step.saying, step.trainers, why)
		}
		if ok, why := hasEvent(t, ns, "fifth", "Resizing", "to replace "+first); step.trainers == 3 && !ok {
			t.Errorf("no Resizing event: %s", why)
		}
		for name, uid := range uids("") {
			if was, ok := before[name]; ok && was != uid {
				t.Errorf("pod %s was replaced while scaling to %d trainers", name, step.trainers)
			}
		}
		if p := phase(getJob(t, ns, "fifth")); p != "Running" {
			t.Errorf("the job is %s after scaling to %d trainers, want Running", p, step.trainers)
		}
	}
	// One slice now, admitted with 1 trainer, replacing the first; the first Finished by Kueue.
	list, err := env.dyn.Resource(workloads).Namespace(ns).List(ctx(), metav1.ListOptions{LabelSelector: "adam.dev/job=fifth"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range list.Items {
		st, reason := workloadCondition(&w, "Finished")
		sets, _, _ := unstructured.NestedSlice(w.Object, "spec", "podSets")
		counts := ""
		for _, ps := range sets {
			name, _, _ := unstructured.NestedString(ps.(map[string]any), "name")
			count, _, _ := unstructured.NestedInt64(ps.(map[string]any), "count")
			counts += fmt.Sprintf(" %s=%d", name, count)
		}
		got = append(got, fmt.Sprintf("%s (finished %s %s, replaces %q,%s)", w.GetName(), st, reason,
			w.GetAnnotations()["kueue.x-k8s.io/workload-slice-replacement-for"], counts))
	}
	sort.Strings(got)
	want := []string{
		fmt.Sprintf("%s (finished True WorkloadSliceReplaced, replaces \"\", ps=2 data-server=1 trainer=2)", first),
		fmt.Sprintf("%s-g2 (finished  , replaces %q, ps=2 data-server=1 trainer=1)", first, ns+"/"+first),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the job's Workloads:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A job that asks for gang scheduling on a cluster without the coscheduling plugin's PodGroup
// API makes no pod, and says why in its status and an event.
func TestAGangWithoutThePodGroupApiSaysWhy(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-gang")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "gang")
	set(job, "spec/runPolicy/schedulingPolicy", map[string]any{"coscheduling": true})
	createJob(t, ns, job)
	eventually(t, 30*time.Second, "the NoPodGroupAPI condition", func() (bool, string) {
		st, reason, msg := condition(getJob(t, ns, "gang"), "Created")
		return st == "False" && reason == "NoPodGroupAPI" && strings.Contains(msg, "scheduling.x-k8s.io"), st + " " + reason
	})
	if ok, why := hasEvent(t, ns, "gang", "NoPodGroupAPI", "coscheduling"); !ok {
		t.Error("no NoPodGroupAPI event:", why)
	}
	if n := len(jobPods(t, ns, "gang", "")); n != 0 {
		t.Errorf("a gang without its PodGroup made %d pods", n)
	}
	_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), "gang", metav1.DeleteOptions{})
}

// Kubernetes' own gang scheduling (the cluster runs with its alpha gates on, e2e.sh), on two fake
// nodes of the test's own (16 CPUs each, labelled so that only the job's pods go there): a job
// whose five pods fit on the first only in part (2 trainers of 8 CPUs beside 3 pods of 1) has none
// bound, though three or four would fit; once the second node exists, all are bound. Every pod
// names the job's PodGroup, whose minCount is the job's pod count.
func TestKubernetesOwnGangPlacesAllOrNone(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-kgang")
	const label = "adam.dev/e2e-gang"
	node := func(name string) {
		t.Helper()
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
					"kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": "zone-gang", "type": "kwok", label: "yes"},
			},
			Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"),
					corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")},
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"),
					corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")},
			},
		}
		if _, err := env.cs.CoreV1().Nodes().Create(ctx(), n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("node %s: %v", name, err)
		}
	}
	defer func() {
		_ = env.dyn.Resource(adamJobs).Namespace(ns).Delete(ctx(), "kgang", metav1.DeleteOptions{})
		eventually(t, 60*time.Second, "the gang's pods gone", func() (bool, string) {
			n := len(jobPods(t, ns, "kgang", ""))
			return n == 0, fmt.Sprint(n, " pods")
		})
		for _, n := range []string{"gang-a", "gang-b"} {
			_ = env.cs.CoreV1().Nodes().Delete(ctx(), n, metav1.DeleteOptions{})
		}
	}()
	node("gang-a")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "kgang")
	set(job, "spec/runPolicy/schedulingPolicy", map[string]any{"gang": true})
	set(job, "spec/podTemplate", map[string]any{"nodeSelector": map[string]any{label: "yes"}})
	set(job, "spec/roles/trainer/resources", map[string]any{"cpu": "8"})
	createJob(t, ns, job)
	eventually(t, 30*time.Second, "the job's five pods made", func() (bool, string) {
		n := len(jobPods(t, ns, "kgang", ""))
		return n == 5, fmt.Sprint(n, " pods")
	})
	for _, p := range jobPods(t, ns, "kgang", "") {
		if g := p.Spec.SchedulingGroup; g == nil || g.PodGroupName == nil || *g.PodGroupName != "kgang" {
			t.Errorf("pod %s names scheduling group %v, want PodGroup kgang", p.Name, g)
		}
	}
	groups := schema.GroupVersionResource{Group: "scheduling.k8s.io", Version: "v1alpha2", Resource: "podgroups"}
	pg, err := env.dyn.Resource(groups).Namespace(ns).Get(ctx(), "kgang", metav1.GetOptions{})
	if err != nil {
		t.Fatal("the job's PodGroup:", err)
	}
	if min, _, _ := unstructured.NestedInt64(pg.Object, "spec", "schedulingPolicy", "gang", "minCount"); min != 5 {
		t.Errorf("the PodGroup's minCount is %d, want 5", min)
	}
	bound := func() []string {
		var on []string
		for _, p := range jobPods(t, ns, "kgang", "") {
			if p.Spec.NodeName != "" {
				on = append(on, p.Name+"@"+p.Spec.NodeName)
			}
		}
		return on
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if on := bound(); len(on) > 0 {
			t.Fatalf("part of a gang bound while the whole cannot fit: %v", on)
		}
	}
	added := time.Now()
	node("gang-b")
	eventually(t, 90*time.Second, "every pod of the gang bound", func() (bool, string) {
		on := bound()
		return len(on) == 5, fmt.Sprint(on)
	})
	fmt.Printf("e2e: Kubernetes' gang bound all 5 pods %v after a second node could take them\n",
		time.Since(added).Round(time.Millisecond))
	waitPhase(t, ns, "kgang", "Running", 60*time.Second)

	// Scaled below the PodGroup's minCount (immutable), a pod made again is made outside the
	// gang, and bound: in it, it would wait for five pods of which four exist.
	kubectl(t, "scale", "-n", ns, "adamjob/kgang", "--replicas=1")
	eventually(t, 30*time.Second, "one trainer", func() (bool, string) {
		n := len(jobPods(t, ns, "kgang", "trainer"))
		return n == 1, fmt.Sprint(n, " trainers")
	})
	old := ""
	for _, p := range jobPods(t, ns, "kgang", "ps") {
		if p.Name == "kgang-ps-0" {
			old = string(p.UID)
		}
	}
	kubectl(t, "delete", "pod", "kgang-ps-0", "-n", ns, "--wait=false")
	eventually(t, 60*time.Second, "kgang-ps-0 made again and bound", func() (bool, string) {
		for _, p := range jobPods(t, ns, "kgang", "ps") {
			if p.Name == "kgang-ps-0" && string(p.UID) != old {
				if p.Spec.SchedulingGroup != nil {
					t.Fatalf("kgang-ps-0 made again in the gang (%v) though the job has 4 pods of its minCount 5", *p.Spec.SchedulingGroup.PodGroupName)
				}
				return p.Spec.NodeName != "", "not bound"
			}
		}
		return false, "not made again"
	})
}

func workloadCondition(w *unstructured.Unstructured, kind string) (string, string) {
	if w == nil {
		return "no Workload", ""
	}
	conds, _, _ := unstructured.NestedSlice(w.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == kind {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"])
		}
	}
	return "", ""
}
