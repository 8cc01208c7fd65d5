package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// tokenWorks asks the API server who `token` is: false once it is revoked.
func tokenWorks(t *testing.T, token string) bool {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(env.clusterDir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	req, _ := http.NewRequest("GET", env.vars["ADAM_CLUSTER_SERVER"]+"/api/v1/namespaces/"+operatorNamespace+"/pods", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func secret(t *testing.T, name string) {
	t.Helper()
	_, err := env.cs.CoreV1().Secrets(operatorNamespace).Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// runJob creates the small example as NAME in `ns` and waits for it to run.
func runJob(t *testing.T, ns, name string) {
	t.Helper()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", name)
	createJob(t, ns, job)
	waitPhase(t, ns, name, "Running", 90*time.Second)
}

// A bound token that is revoked and replaced in the token file (as the kubelet rotates a pod's):
// the operator reads the file again and goes on.
func TestARotatedTokenIsReadAgain(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-rotate")
	secret(t, "e2e-rotate-1")
	kubeconfig, err := serviceAccountKubeconfig("rotate", "e2e-rotate-1")
	if err != nil {
		t.Fatal(err)
	}
	o := startOperatorWith(t, "rotate", []string{"--kubeconfig", kubeconfig}, nil, "--leader-elect=false", "--namespace", ns)
	defer o.stop()
	runJob(t, ns, "before")
	old, _ := os.ReadFile(filepath.Join(env.logs, "rotate.token"))
	secret(t, "e2e-rotate-2")
	fresh, err := serviceAccountToken("e2e-rotate-2")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.logs, "rotate.token"), []byte(fresh), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := env.cs.CoreV1().Secrets(operatorNamespace).Delete(ctx(), "e2e-rotate-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the old token revoked", func() (bool, string) { return !tokenWorks(t, string(old)), "" })
	runJob(t, ns, "after")
	o.noForbidden(t)
	_ = env.cs.CoreV1().Secrets(operatorNamespace).Delete(ctx(), "e2e-rotate-2", metav1.DeleteOptions{})
}

// No --kubeconfig and not in a pod: the operator uses $KUBECONFIG, as kubectl does (a file of
// the list that does not exist is skipped).
func TestTheOperatorHonoursKubeconfigInTheEnvironment(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-env")
	o := startOperatorWith(t, "env", nil, []string{"KUBECONFIG=/nonexistent-first:" + saKubeconfig}, "--leader-elect=false", "--namespace", ns)
	defer o.stop()
	runJob(t, ns, "env")
	o.noForbidden(t)
}

// An exec credential plugin (client.authentication.k8s.io/v1), as cloud providers' kubeconfigs
// use: the operator runs it, caches its token, and works.
func TestAnExecCredentialPluginAuthenticates(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-exec")
	dir := t.TempDir()
	token, err := serviceAccountToken("")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(dir, "adam-credential")
	script := `#!/bin/sh
# A credential plugin: prints an ExecCredential with the token it keeps, and counts its runs.
echo run >> "$(dirname "$0")/runs"
[ -n "$KUBERNETES_EXEC_INFO" ] || exit 3
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s","expirationTimestamp":"%s"}}' \
  "$(cat "$(dirname "$0")/token")" "$(date -u -d '+1 hour' +%Y-%m-%dT%H:%M:%SZ)"
`
	if err := os.WriteFile(plugin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, certificate-authority: %q}
users:
- name: plugin
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./adam-credential
      interactiveMode: Never
contexts:
- name: local
  context: {cluster: local, user: plugin, namespace: %s}
current-context: local
`, env.vars["ADAM_CLUSTER_SERVER"], filepath.Join(env.clusterDir, "pki", "ca.crt"), operatorNamespace)
	if err := os.WriteFile(kubeconfig, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	o := startOperatorWith(t, "exec", []string{"--kubeconfig", kubeconfig}, nil, "--leader-elect=false", "--namespace", ns)
	defer o.stop()
	runJob(t, ns, "exec")
	o.noForbidden(t)
	runs, _ := os.ReadFile(filepath.Join(dir, "runs"))
	// Two clients (reads and writes), each runs it once and caches the hour-long token.
	if n := strings.Count(string(runs), "run"); n < 1 || n > 2 {
		t.Errorf("the plugin ran %d times, want once per client", n)
	}
}

// throttle puts the chart ServiceAccount's requests on a priority level of API Priority and
// Fairness with a single seat and no queue, and keeps that seat busy with requests of its own:
// the API server refuses the operator's requests with 429 and Retry-After: 1, as a loaded
// cluster does. The returned function lifts it.
func throttle(t *testing.T) func() {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: e2e-throttle}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 0
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {type: Reject}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: e2e-throttle}
spec:
  priorityLevelConfiguration: {name: e2e-throttle}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: %s, namespace: %s}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
`, release, operatorNamespace)
	if out, errs, err := run(manifest, "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("throttle: %v %s%s", err, out, errs)
	}
	token, err := serviceAccountToken("")
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(env.clusterDir, "pki", "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 8}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				req, _ := http.NewRequest("GET", env.vars["ADAM_CLUSTER_SERVER"]+"/api/v1/pods", nil)
				req.Header.Set("Authorization", "Bearer "+token)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			stop.Store(true)
			wg.Wait()
			_, _, _ = run(manifest, "kubectl", "delete", "-f", "-")
		})
	}
}

// 429 Too Many Requests with Retry-After (API Priority and Fairness with no seat to spare): the
// operator waits as told instead of hammering, and gets its job done once the load goes.
func TestTooManyRequestsAreWaitedOut(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-429")
	o := startOperator(t, "throttled", "--leader-elect=false", "--namespace", ns)
	defer o.stop()
	runJob(t, ns, "first")
	lift := throttle(t)
	defer lift()
	start := o.metric(t, "rest_client_requests_total", `code="429"`)
	requests := func() float64 {
		return o.metric(t, "rest_client_requests_total") - o.metric(t, "rest_client_requests_total", `method="WATCH"`)
	}
	before, t0 := requests(), time.Now()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "second")
	createJob(t, ns, job)
	eventually(t, 30*time.Second, "the operator refused with 429", func() (bool, string) {
		return o.metric(t, "rest_client_requests_total", `code="429"`) > start, "no 429 yet"
	})
	time.Sleep(5 * time.Second)
	refused := o.metric(t, "rest_client_requests_total", `code="429"`) - start
	made, took := requests()-before, time.Since(t0).Seconds()
	t.Logf("under load: %v of the operator's %v requests in %.1f s refused with 429", refused, made, took)
	// Two workers that each wait the Retry-After second between tries make a few requests a
	// second; retrying at once would make hundreds.
	if made/took > 15 {
		t.Errorf("%.1f requests/s while refused: Retry-After is not honoured", made/took)
	}
	lift()
	waitPhase(t, ns, "second", "Running", 90*time.Second)
	o.noForbidden(t)
}

// closedConnections counts the sockets to `port` in TIME_WAIT: each a closed connection.
func closedConnections(t *testing.T, port int) int {
	t.Helper()
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "06" {
				continue
			}
			for _, addr := range fields[1:3] {
				if i := strings.LastIndex(addr, ":"); i > 0 {
					if p, _ := strconv.ParseInt(addr[i+1:], 16, 32); int(p) == port {
						n++
					}
				}
			}
		}
		f.Close()
	}
	return n
}

// Client-side limits: at --kube-api-qps 5 the operator's requests stay at 5 a second however
// much there is to do, over connections it keeps (no connection closed per request).
func TestTheOperatorKeepsItsRateLimitAndItsConnections(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-qps")
	o := startOperator(t, "qps", "--leader-elect=false", "--namespace", ns, "--kube-api-qps", "5", "--kube-api-burst", "5")
	defer o.stop()
	server := env.vars["ADAM_CLUSTER_SERVER"]
	port, _ := strconv.Atoi(server[strings.LastIndex(server, ":")+1:])
	requests := func() float64 {
		return o.metric(t, "rest_client_requests_total") - o.metric(t, "rest_client_requests_total", `method="WATCH"`)
	}
	time.Sleep(2 * time.Second)
	closedBefore, before, start := closedConnections(t, port), requests(), time.Now()
	for _, name := range []string{"qps-a", "qps-b"} {
		job := example(t, "fashion-mnist")
		set(job, "metadata/name", name)
		createJob(t, ns, job)
	}
	waitPhase(t, ns, "qps-a", "Running", 120*time.Second)
	waitPhase(t, ns, "qps-b", "Running", 120*time.Second)
	made, took := requests()-before, time.Since(start).Seconds()
	closed := closedConnections(t, port) - closedBefore
	t.Logf("%v requests in %.1f s (%.1f/s at --kube-api-qps 5); %d connections to the API server closed meanwhile", made, took, made/took, closed)
	if limit := 5*took + 5 + 1; made > limit { // the burst, then 5 a second
		t.Errorf("%v requests in %.1f s, over the %v that qps 5 and burst 5 allow", made, took, limit)
	}
	if float64(closed) > made/4 {
		t.Errorf("%d connections closed for %v requests: connections are not reused", closed, made)
	}
	o.noForbidden(t)
}

// A pod whose /metrics never answers (a black-holed address) holds no reconcile: scrapes run
// on their own threads, and every reconcile stays short while the pod's scrapes time out. A
// reconcile that scraped itself would wait out the scrape's 1 s timeout: every reconcile must
// take under 1 s (0.5 s was exceeded once by a reconcile of a machine busy with other tests).
func TestASlowTrainerScrapeStallsNoReconcile(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-slow")
	// A metrics port that accepts and never answers.
	l, err := net.Listen("tcp", "127.0.0.2:9090")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2:9090: %v", err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	defer func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	o := startOperator(t, "slow", "--leader-elect=false", "--namespace", ns, "--workers", "2")
	defer o.stop()
	runJob(t, ns, "slow")
	for _, p := range jobPods(t, ns, "slow", "trainer") {
		p.Status.PodIP = "127.0.0.2"
		p.Status.PodIPs = []corev1.PodIP{{IP: "127.0.0.2"}}
		if _, err := env.cs.CoreV1().Pods(ns).UpdateStatus(ctx(), &p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "scrapes of the silent pods", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return len(held) >= 2, fmt.Sprint(len(held), " connections")
	})
	count0 := o.metric(t, "controller_runtime_reconcile_time_seconds_count")
	fast0 := o.metric(t, "controller_runtime_reconcile_time_seconds_bucket", `le="1"`)
	runJob(t, ns, "other") // reconciles of both jobs while the scrapes hang
	// The silent pods' job reconciled too: an annotation is a change the operator looks at (its
	// own status writes are not, so they add no reconcile).
	for i := 0; i < 3; i++ {
		kubectl(t, "annotate", "--overwrite", "adamjob/slow", "-n", ns, fmt.Sprintf("e2e/touch=%d", i))
		time.Sleep(time.Second)
	}
	count := o.metric(t, "controller_runtime_reconcile_time_seconds_count") - count0
	fast := o.metric(t, "controller_runtime_reconcile_time_seconds_bucket", `le="1"`) - fast0
	t.Logf("%v reconciles while the trainers' scrapes hung, %v of them within 1 s", count, fast)
	if count < 5 || fast < count {
		t.Errorf("%v of %v reconciles took over 1 s: a scrape holds them", count-fast, count)
	}
	o.noForbidden(t)
}
