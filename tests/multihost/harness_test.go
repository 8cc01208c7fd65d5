// Package multihost runs AdamJobs with every role in its own container of the adam image (make
// image), as the operator runs them as pods: the pods are what `adam render -o json` prints (the
// operator's own rendering), each container gets its pod's arguments, environment (the downward
// API's values resolved as the kubelet resolves them), hostname, user, read-only root, mounts
// (the manifest, the job's TLS files, the downward-API annotations, a state directory) and DNS
// name under the job's headless Service. No CPU quota: each container stands for a pod on a
// machine of its own, and here they all share this machine's cores. Two Docker networks stand for the
// pod network and the Multus second network: parameter servers are attached to both, and their
// network-status annotation names their address on the second one, as Multus writes it.
// Faults are real: docker kill, pause, and networks disconnected.
package multihost

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The paths and names the operator's pods use (operator/reconcile/render.h).
const (
	jobMountPath     = "/etc/adam"
	podInfoPath      = "/etc/podinfo"
	statePath        = "/var/lib/adam"
	tlsPath          = "/etc/adam-tls"
	stageAnnotation  = "adam.dev/stage"
	roleLabel        = "adam.dev/role"
	multusAnnotation = "k8s.v1.cni.cncf.io/networks"
	networkStatus    = "k8s.v1.cni.cncf.io/network-status"
	tlsServerName    = "adam-role" // the name every role's certificate carries (workers/libs/net/tls.h)
	metricsPort      = 9090
)

var env struct {
	binary, image, source, logs string
}

// A pod of the rendered job, run as one container.
type pod struct {
	name, role       string
	stage            int
	args             []string
	hostname, domain string         // the pod's DNS name is hostname.domain
	replication      bool           // attached to the second network (Multus annotation)
	spec             map[string]any // the rendered container: its env and resources
	container        string
	podinfo, state   string // host directories mounted at podInfoPath and statePath
}

type job struct {
	t                    *testing.T
	name, example        string
	prefix               string // of every container and network of this job
	dir                  string
	primary, replication string // the two Docker networks
	pods                 []*pod
	extra                []*pod // containers of pods run again under other names (check rounds)
	byName               map[string]*pod
	start                time.Time
	mu                   sync.Mutex
	restarts             map[string]bool // pods whose containers are down on purpose
}

var serial int

func TestMain(m *testing.M) {
	root, _ := filepath.Abs("../..")
	env.source = root
	env.binary = getenv("ADAM_BINARY", filepath.Join(root, "build/adam"))
	env.image = os.Getenv("ADAM_IMAGE")
	env.logs = getenv("ADAM_MULTIHOST_LOGS", filepath.Join(root, "build/multihost-logs"))
	if env.image == "" {
		fmt.Fprintln(os.Stderr, "multihost: ADAM_IMAGE is not set (make multihost sets it to the image make image built)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func getenv(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

func docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func (j *job) docker(args ...string) string {
	j.t.Helper()
	out, err := docker(args...)
	if err != nil {
		j.t.Fatal(err)
	}
	return out
}

func (j *job) logf(format string, args ...any) {
	j.t.Helper()
	j.t.Logf("%6.1f s  %s", time.Since(j.start).Seconds(), fmt.Sprintf(format, args...))
}

// edit changes the manifest's text: `key: value` lines replaced under their indentation, or,
// for a key "text:OLD", the text OLD replaced by value.
type edit struct{ key, value string }

// newJob renders examples/<example>.yaml with the edits through `adam render -o json` and makes
// the job's networks and host directories; nothing runs yet.
func newJob(t *testing.T, example string, edits ...edit) *job {
	t.Helper()
	serial++
	j := &job{t: t, prefix: fmt.Sprintf("amh%d-%d", os.Getpid()%10000, serial), dir: t.TempDir(),
		byName: map[string]*pod{}, start: time.Now(), restarts: map[string]bool{}, example: example}
	j.primary, j.replication = j.prefix+"-pods", j.prefix+"-replication"
	text, err := os.ReadFile(filepath.Join(env.source, "examples", example+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The examples name no image (a cluster's comes from the chart): this harness's goes in.
	manifest := strings.Replace(string(text), "\nspec:\n", "\nspec:\n  image: "+env.image+"\n", 1)
	for _, e := range edits {
		if text, ok := strings.CutPrefix(e.key, "text:"); ok { // a literal replacement
			if !strings.Contains(manifest, text) {
				t.Fatalf("%s.yaml has no %q to replace", example, text)
			}
			manifest = strings.Replace(manifest, text, e.value, 1)
			continue
		}
		manifest = setKey(t, manifest, e.key, e.value)
	}
	if strings.Contains(manifest, "copies: 3") && !strings.Contains(manifest, "networks:") {
		// The second network, by the name of its (Multus) attachment.
		manifest = strings.Replace(manifest, "  roles:\n", "  networks:\n    replication: "+j.replication+"\n  roles:\n", 1)
	}
	jobDir := filepath.Join(j.dir, "job")
	must(t, os.MkdirAll(jobDir, 0o755))
	must(t, os.WriteFile(filepath.Join(jobDir, "job.yaml"), []byte(manifest), 0o644))
	out, err := exec.Command(env.binary, "render", "-o", "json", filepath.Join(jobDir, "job.yaml")).Output()
	if err != nil {
		t.Fatalf("adam render: %v", err)
	}
	var objects []map[string]any
	must(t, json.Unmarshal(out, &objects))
	for _, o := range objects {
		md, _ := o["metadata"].(map[string]any)
		spec, _ := o["spec"].(map[string]any)
		switch o["kind"] {
		case "StatefulSet":
			tmpl := spec["template"].(map[string]any)
			tmd := tmpl["metadata"].(map[string]any)
			replicas := int(spec["replicas"].(float64))
			for i := 0; i < replicas; i++ {
				name := fmt.Sprintf("%s-%d", md["name"], i)
				j.addPod(name, tmd, tmpl["spec"].(map[string]any), name, spec["serviceName"].(string))
			}
		case "Pod":
			j.addPod(md["name"].(string), md, spec, spec["hostname"].(string), spec["subdomain"].(string))
		// Nothing of these runs in containers: a disruption budget matters to the eviction API
		// alone, which the real nodes test (make k8s-nodes).
		case "AdamJob", "ConfigMap", "Service", "NetworkPolicy", "PersistentVolumeClaim", "PodDisruptionBudget":
		default:
			t.Fatalf("adam render made a %v this harness does not run", o["kind"])
		}
		if o["kind"] == "ConfigMap" && j.name == "" {
			j.name = strings.TrimSuffix(md["name"].(string), "-job")
		}
	}
	sort.SliceStable(j.pods, func(a, b int) bool { return j.pods[a].stage < j.pods[b].stage })
	writeTLS(t, filepath.Join(j.dir, "tls"))
	j.docker("network", "create", j.primary)
	j.docker("network", "create", j.replication)
	t.Cleanup(j.cleanup)
	return j
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// setKey replaces the value of every `key:` line (at any indentation) in a manifest.
func setKey(t *testing.T, manifest, key, value string) string {
	lines := strings.Split(manifest, "\n")
	found := false
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		if strings.HasPrefix(trimmed, key+":") {
			lines[i] = l[:len(l)-len(trimmed)] + key + ": " + value
			found = true
		}
	}
	if !found {
		t.Fatalf("the manifest has no %q", key)
	}
	return strings.Join(lines, "\n")
}

func (j *job) addPod(name string, md, spec map[string]any, hostname, domain string) {
	labels, _ := md["labels"].(map[string]any)
	annotations, _ := md["annotations"].(map[string]any)
	stage, _ := strconv.Atoi(fmt.Sprint(annotations[stageAnnotation]))
	c := spec["containers"].([]any)[0].(map[string]any)
	var args []string
	for _, a := range c["args"].([]any) {
		// $(ADAM_POD_NAME), as the kubelet expands it from the downward API.
		args = append(args, strings.ReplaceAll(a.(string), "$(ADAM_POD_NAME)", name))
	}
	_, multus := annotations[multusAnnotation]
	p := &pod{name: name, role: fmt.Sprint(labels[roleLabel]), stage: stage, args: args,
		hostname: hostname, domain: domain, replication: multus, container: j.prefix + "-" + name}
	p.spec = c
	p.podinfo = filepath.Join(j.dir, "podinfo", name)
	p.state = filepath.Join(j.dir, "state", name)
	for _, d := range []string{p.podinfo, p.state} {
		must(j.t, os.MkdirAll(d, 0o755))
		must(j.t, os.Chmod(d, 0o777)) // the pod runs as uid 10001, as the chart's pods do
	}
	j.pods = append(j.pods, p)
	j.byName[name] = p
}

// resolveEnv gives a pod's environment as the kubelet would: plain values, and the downward
// API's pod name, node name (its container's: each container stands for a machine) and CPU
// limit in millicores. A container without a CPU limit reads the node's allocatable CPUs there,
// all of this machine's.
func (j *job) resolveEnv(p *pod) (vars []string) {
	name, c := p.name, p.spec
	cpus := p.cpuLimit()
	list, _ := c["env"].([]any)
	for _, e := range list {
		v := e.(map[string]any)
		key := fmt.Sprint(v["name"])
		if value, ok := v["value"]; ok {
			vars = append(vars, key+"="+fmt.Sprint(value))
			continue
		}
		from, _ := v["valueFrom"].(map[string]any)
		if f, ok := from["fieldRef"].(map[string]any); ok {
			switch f["fieldPath"] {
			case "metadata.name":
				vars = append(vars, key+"="+name)
			case "spec.nodeName":
				vars = append(vars, key+"="+p.container)
			default:
				j.t.Fatalf("pod %s: env %s: this harness does not resolve fieldRef %v", name, key, f["fieldPath"])
			}
			continue
		}
		r, ok := from["resourceFieldRef"].(map[string]any)
		if !ok || r["resource"] != "limits.cpu" || r["divisor"] != "1m" {
			j.t.Fatalf("pod %s: env %s: this harness does not resolve %v", name, key, v["valueFrom"])
		}
		millis := int64(runtime.NumCPU()) * 1000
		if cpus != "" {
			var err error
			millis, err = cpuMillis(cpus)
			must(j.t, err)
		}
		vars = append(vars, key+"="+strconv.FormatInt(millis, 10))
	}
	return vars
}

// cpuLimit gives the rendered container's CPU limit, a Kubernetes quantity ("" when unset).
func (p *pod) cpuLimit() string {
	r, _ := p.spec["resources"].(map[string]any)
	l, _ := r["limits"].(map[string]any)
	if q, ok := l["cpu"]; ok {
		return fmt.Sprint(q)
	}
	return ""
}

// cpuMillis reads a Kubernetes CPU quantity ("2", "500m", "1.5") in millicores.
func cpuMillis(q string) (int64, error) {
	if m, ok := strings.CutSuffix(q, "m"); ok {
		return strconv.ParseInt(m, 10, 64)
	}
	f, err := strconv.ParseFloat(q, 64)
	if err != nil {
		return 0, fmt.Errorf("CPU quantity %q: %v", q, err)
	}
	return int64(f*1000 + 0.5), nil
}

// certRoles are the names the job's certificates carry, one per role (workers/libs/net/access.h).
var certRoles = []string{"controller", "ps", "trainer", "data-server"}

// certRole is the certificate a pod of the role label `role` mounts: a model worker is a trainer.
func certRole(role string) string {
	if role == "model-worker" {
		return "trainer"
	}
	return role
}

// writeTLS makes the job's certificates as the operator does: a CA and, in DIR/ROLE, each role's
// own certificate (its name in the subject CN) with the CA, the three files a pod of that role
// mounts.
func writeTLS(t *testing.T, dir string) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "multihost CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(t, err)
	ca, _ := x509.ParseCertificate(caDER)
	for i, role := range certRoles {
		writeRoleTLS(t, filepath.Join(dir, role), role, int64(i+2), ca, caKey, caDER)
	}
}

func writeRoleTLS(t *testing.T, dir, role string, serial int64, ca *x509.Certificate, caKey *ecdsa.PrivateKey, caDER []byte) {
	must(t, os.MkdirAll(dir, 0o755))
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: role},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{tlsServerName},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	must(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	files := map[string][]byte{
		"ca.crt":  pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}
	for name, data := range files {
		must(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
}

// run starts every pod, stage by stage (a stage's serving pods ready before the next starts, as
// the operator orders them), runs `during` (the faults) beside the job, and waits for the
// trainers to end, at most `limit`, and for `during` to return.
func (j *job) run(limit time.Duration, during func()) {
	j.startStages(func(*pod) bool { return true })
	j.start = time.Now()
	finished := make(chan struct{})
	var faultsEnded time.Time // written before finished is closed
	if during != nil {
		go func() {
			defer close(finished)
			during()
			faultsEnded = time.Now()
		}()
	} else {
		close(finished)
	}
	j.waitTrainers(limit)
	trained := time.Now()
	// The faults end before the test does (they report through j.t).
	select {
	case <-finished:
	case <-time.After(2 * time.Minute):
		j.t.Fatalf("the fault schedule did not end within 2 min of the job")
	}
	// A fault that found the training over showed nothing of how the job goes on through it
	// (a machine fast enough to train the epochs before the schedule ends).
	if during != nil && faultsEnded.After(trained) {
		j.t.Errorf("the trainers ended %.1f s into the job, before the fault schedule (%.1f s): its last faults met no training; the job needs more epochs on this machine",
			trained.Sub(j.start).Seconds(), faultsEnded.Sub(j.start).Seconds())
	}
}

// startServing starts every pod but the trainers, stage by stage.
func (j *job) startServing() {
	j.startStages(func(p *pod) bool { return p.role != "trainer" })
}

// startStages starts the pods `which` selects, stage by stage: a stage's serving pods ready
// before the next starts, as the operator orders them.
func (j *job) startStages(which func(*pod) bool) {
	j.logf("job %s: %d pods on networks %s and %s", j.name, len(j.pods), j.primary, j.replication)
	for stage := 0; ; stage++ {
		var these []*pod
		for _, p := range j.pods {
			if p.stage == stage && which(p) {
				these = append(these, p)
			}
		}
		if len(these) == 0 {
			if stage > 8 {
				break
			}
			continue
		}
		for _, p := range these {
			j.create(p)
		}
		for _, p := range these {
			if p.role != "trainer" {
				j.waitEvent(p, "ready", 120*time.Second)
			}
		}
		j.logf("stage %d ready (%d pods)", stage, len(these))
	}
}

// create makes and starts a pod's container.
func (j *job) create(p *pod) {
	args := []string{"create", "--name", p.container, "--hostname", p.hostname,
		"--network", j.primary, "--network-alias", p.hostname + "." + p.domain,
		"--user", "10001:10001", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
		"--tmpfs", "/tmp",
		"-v", filepath.Join(j.dir, "job") + ":" + jobMountPath + ":ro",
		"-v", filepath.Join(j.dir, "tls", certRole(p.role)) + ":" + tlsPath + ":ro",
		"-v", p.podinfo + ":" + podInfoPath + ":ro",
		"-v", p.state + ":" + statePath,
		"--label", "dev.adam.multihost=" + j.prefix,
		"--entrypoint", "adam"}
	for _, e := range j.resolveEnv(p) {
		args = append(args, "-e", e)
	}
	args = append(args, env.image)
	args = append(args, p.args...)
	j.docker(args...)
	if p.replication {
		j.docker("network", "connect", "--alias", p.hostname+".replication", j.replication, p.container)
	}
	j.docker("start", p.container)
	j.writeAnnotations(p)
}

// writeAnnotations writes the pod's downward-API annotations file; for a pod on the second
// network, with the network-status Multus would write: its address there.
func (j *job) writeAnnotations(p *pod) {
	lines := fmt.Sprintf("%s=%q\n", stageAnnotation, strconv.Itoa(p.stage))
	if p.replication {
		ip := j.address(p, j.replication)
		status, _ := json.Marshal([]map[string]any{
			{"name": "default/" + j.replication, "interface": "net1", "ips": []string{ip}}})
		lines += fmt.Sprintf("%s=%q\n%s=%q\n", multusAnnotation, j.replication, networkStatus, string(status))
	}
	tmp := filepath.Join(p.podinfo, ".annotations")
	must(j.t, os.WriteFile(tmp, []byte(lines), 0o644))
	must(j.t, os.Rename(tmp, filepath.Join(p.podinfo, "annotations")))
}

// address is the pod's IP on a network ("" when not attached).
func (j *job) address(p *pod, network string) string {
	out, _ := docker("inspect", "-f", "{{with index .NetworkSettings.Networks \""+network+"\"}}{{.IPAddress}}{{end}}", p.container)
	return out
}

// events are the `@adam {...}` lines of a pod's output so far, of the given type ("" = any).
func (j *job) events(p *pod, kind string) []map[string]any {
	out, _ := exec.Command("docker", "logs", p.container).Output() // events go to stdout
	var evs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "@adam ") {
			continue
		}
		var ev map[string]any
		if json.Unmarshal([]byte(line[len("@adam "):]), &ev) != nil {
			continue
		}
		if kind == "" || ev["event"] == kind {
			evs = append(evs, ev)
		}
	}
	return evs
}

func (j *job) waitEvent(p *pod, kind string, limit time.Duration) map[string]any {
	j.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if evs := j.events(p, kind); len(evs) > 0 {
			return evs[len(evs)-1]
		}
		if running, code := j.state(p); !running {
			j.t.Fatalf("%s exited (%d) before %q:\n%s", p.name, code, kind, j.tail(p, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	j.t.Fatalf("%s: no %q event in %v:\n%s", p.name, kind, limit, j.tail(p, 30))
	return nil
}

func (j *job) state(p *pod) (running bool, exitCode int) {
	out, err := docker("inspect", "-f", "{{.State.Running}} {{.State.ExitCode}}", p.container)
	if err != nil {
		return false, -1
	}
	f := strings.Fields(out)
	code, _ := strconv.Atoi(f[1])
	return f[0] == "true", code
}

// running says whether p's container runs now.
func (j *job) running(p *pod) bool {
	running, _ := j.state(p)
	return running
}

func (j *job) tail(p *pod, n int) string {
	out, _ := exec.Command("docker", "logs", "--tail", strconv.Itoa(n), p.container).CombinedOutput()
	return string(out)
}

// waitTrainers waits until every trainer's container has exited and none is down on purpose.
func (j *job) waitTrainers(limit time.Duration) {
	j.t.Helper()
	deadline := time.Now().Add(limit)
	last := time.Now()
	for {
		done := true
		j.mu.Lock()
		for _, p := range j.pods {
			if p.role != "trainer" {
				continue
			}
			if running, code := j.state(p); running || j.restarts[p.name] {
				done = false
			} else if code != 0 {
				j.mu.Unlock()
				j.t.Fatalf("%s failed (exit %d):\n%s", p.name, code, j.tail(p, 40))
			}
		}
		j.mu.Unlock()
		if done {
			j.logf("every trainer ended")
			return
		}
		if time.Now().After(deadline) {
			j.t.Fatalf("the trainers did not end in %v", limit)
		}
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			if evs := j.events(j.trainer(0), "epoch"); len(evs) > 0 {
				ev := evs[len(evs)-1]
				j.logf("trainer-0: epoch %v, loss %.4f, test accuracy %v", ev["epoch"], ev["loss"], ev["test_accuracy"])
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (j *job) trainer(i int) *pod { return j.pod(fmt.Sprintf("trainer-%d", i)) }

// pod by its instance name ("ps-0", "controller-1") or its full name.
func (j *job) pod(name string) *pod {
	if p, ok := j.byName[name]; ok {
		return p
	}
	if p, ok := j.byName[j.name+"-"+name]; ok {
		return p
	}
	j.t.Fatalf("no pod %s in job %s", name, j.name)
	return nil
}

// result is the job's outcome: trainer 0's last `done` event (its final evaluation).
type result struct {
	accuracy float64
	epochs   int
}

func (j *job) result() result {
	j.t.Helper()
	evs := j.events(j.trainer(0), "done")
	if len(evs) == 0 {
		j.t.Fatalf("trainer-0 never reported done:\n%s", j.tail(j.trainer(0), 30))
	}
	ev := evs[len(evs)-1]
	r := result{accuracy: ev["test_accuracy"].(float64), epochs: int(ev["epochs"].(float64))}
	j.logf("result: %d epochs, test accuracy %.2f%%", r.epochs, 100*r.accuracy)
	return r
}

// metrics reads a pod's /metrics from this host (the networks are bridges this host is on):
// the sum of each metric's samples by name.
func (j *job) metrics(p *pod) map[string]float64 {
	j.t.Helper()
	m, err := j.scrape(p)
	if err != nil {
		j.t.Fatalf("%s /metrics: %v", p.name, err)
	}
	return m
}

func (j *job) scrape(p *pod) (map[string]float64, error) {
	ip := j.address(p, j.primary)
	if ip == "" {
		return nil, fmt.Errorf("%s has no address on %s", p.name, j.primary)
	}
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s:%d/metrics", ip, metricsPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name := f[0]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err == nil {
			out[name] += v
		}
	}
	return out, sc.Err()
}

// Faults.

func (j *job) kill(p *pod) {
	j.logf("docker kill %s", p.name)
	if _, err := docker("kill", p.container); err != nil {
		j.t.Errorf("%v", err)
	}
}

// restart brings a killed pod back under its name (as a replaced pod), after `after`.
func (j *job) restart(p *pod, after time.Duration) {
	j.mu.Lock()
	j.restarts[p.name] = true
	j.mu.Unlock()
	time.Sleep(after)
	j.logf("docker start %s", p.name)
	if _, err := docker("start", p.container); err != nil {
		j.t.Errorf("restarting %s: %v", p.name, err)
	}
	j.writeAnnotations(p)
	j.mu.Lock()
	delete(j.restarts, p.name)
	j.mu.Unlock()
}

func (j *job) cleanup() {
	dir := filepath.Join(env.logs, strings.ReplaceAll(j.t.Name(), "/", "_"))
	os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	for _, p := range append(append([]*pod{}, j.pods...), j.extra...) {
		out, _ := exec.Command("docker", "logs", "-t", p.container).CombinedOutput()
		os.WriteFile(filepath.Join(dir, strings.TrimPrefix(p.container, j.prefix+"-")+".log"), out, 0o644)
	}
	ids, _ := docker("ps", "-aq", "--filter", "label=dev.adam.multihost="+j.prefix)
	if ids != "" {
		docker(append([]string{"rm", "-f"}, strings.Fields(ids)...)...)
	}
	docker("network", "rm", j.primary, j.replication)
	// The state directories hold files of uid 10001: let the test's TempDir remove them.
	filepath.Walk(j.dir, func(path string, info os.FileInfo, err error) error {
		if err == nil {
			os.Chmod(path, 0o777)
		}
		return nil
	})
}
