package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ownedObjects lists every object labelled adam.dev/job=JOB of the kinds a job owns, as
// "Kind/name" -> the uid of its controller owner ("" when it has none).
func ownedObjects(t *testing.T, ns, job string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "services"}, {Version: "v1", Resource: "configmaps"},
		{Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "persistentvolumeclaims"},
		{Group: "apps", Version: "v1", Resource: "statefulsets"}, {Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	} {
		list, err := env.dyn.Resource(r).Namespace(ns).List(ctx(), metav1.ListOptions{LabelSelector: "adam.dev/job=" + job})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list.Items {
			owner := ""
			for _, ref := range o.GetOwnerReferences() {
				if ref.Controller != nil && *ref.Controller {
					owner = string(ref.UID)
				}
			}
			out[r.Resource+"/"+o.GetName()] = owner
		}
	}
	return out
}

// kill -9 of the operator while it creates a job's objects, then a new one: the job runs, with
// exactly the objects its plan has, each owned by the job, and one CA.
func TestOperatorKilledMidJobLeavesNoDuplicateOrOrphan(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-kill9")
	first := startOperator(t, "kill9-first")
	first.logLine(t, "now leads", 30*time.Second)
	job := example(t, "fashion-mnist-ha")
	set(job, "metadata/name", "kill9")
	created := createJob(t, ns, job)
	eventually(t, 30*time.Second, "the first objects of the job", func() (bool, string) {
		n := len(ownedObjects(t, ns, "kill9"))
		return n >= 3, fmt.Sprint(n)
	})
	first.kill()
	second := startOperator(t, "kill9-second")
	defer second.stop()
	waitPhase(t, ns, "kill9", "Running", 120*time.Second)
	objs := ownedObjects(t, ns, "kill9")
	want := map[string]int{"pods": 6, "services": 1, "configmaps": 1, "secrets": 2, "statefulsets": 1, "networkpolicies": 1, "persistentvolumeclaims": 6}
	got := map[string]int{}
	for key, owner := range objs {
		kind := strings.SplitN(key, "/", 2)[0]
		got[kind]++
		// A parameter server's checkpoint claim outlives its job on purpose; the StatefulSet's
		// claims belong to the StatefulSet; everything else to the job.
		switch {
		case kind == "persistentvolumeclaims" && strings.HasPrefix(key, "persistentvolumeclaims/state-"):
		case kind == "persistentvolumeclaims":
			if owner != "" {
				t.Errorf("%s has an owner %s; a checkpoint claim outlives its job", key, owner)
			}
		case kind == "pods" && strings.Contains(key, "-controller-"):
		default:
			if owner != string(created.GetUID()) {
				t.Errorf("%s is owned by %q, not the job %s", key, owner, created.GetUID())
			}
		}
	}
	got["pods"] -= 3 // the StatefulSet's
	for kind, n := range want {
		if got[kind] != n {
			t.Errorf("%d %s, want %d: %v", got[kind], kind, n, objs)
		}
	}
	ca, _ := env.cs.CoreV1().Secrets(ns).Get(ctx(), "kill9-ca", metav1.GetOptions{})
	tls, _ := env.cs.CoreV1().Secrets(ns).Get(ctx(), "kill9-certs", metav1.GetOptions{})
	if ca == nil || tls == nil || !bytes.Equal(ca.Data["ca.crt"], tls.Data["ca.crt"]) {
		t.Error("the certificate is not issued by the job's one CA")
	}
	second.noForbidden(t)
	kubectl(t, "delete", "adamjob", "kill9", "-n", ns, "--wait=false")
}

func leaseHolder(t *testing.T) string {
	t.Helper()
	l, err := env.cs.CoordinationV1().Leases(operatorNamespace).Get(ctx(), release+"-operator", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// Short leases for the leader tests: a standby takes over within 4 s; renew deadline 2.5 s plus
// a 1 s bound on each write stays inside the lease.
var fastLease = []string{"--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "2500ms",
	"--leader-elect-retry-period", "500ms", "--api-write-timeout", "1s"}

// Two operators: one leads and only it reconciles; killed, the other takes over within the lease.
func TestTwoOperatorsOneReconcilesAndTheOtherTakesOver(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-leader")
	a := startOperator(t, "leader-a", fastLease...)
	defer a.stop()
	a.logLine(t, "now leads", 30*time.Second)
	b := startOperator(t, "leader-b", fastLease...)
	defer b.stop()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "leader")
	createJob(t, ns, job)
	waitPhase(t, ns, "leader", "Running", 90*time.Second)
	if leaseHolder(t) != "leader-a" {
		t.Fatalf("Lease held by %q", leaseHolder(t))
	}
	if n := b.metric(t, "controller_runtime_reconcile_total"); n != 0 {
		t.Errorf("the standby reconciled %v times", n)
	}
	if n := a.metric(t, "controller_runtime_reconcile_total"); n == 0 {
		t.Error("the leader never reconciled")
	}
	a.noForbidden(t)
	killed := time.Now()
	a.kill()
	took := eventually(t, 15*time.Second, "the standby leading", func() (bool, string) {
		return leaseHolder(t) == "leader-b", leaseHolder(t)
	})
	at := b.logLine(t, "now leads", 5*time.Second)
	t.Logf("leader killed; the standby took the Lease %v later (log: %v); lease duration 4 s, retry 0.5 s", took.Round(time.Millisecond), at.Sub(killed).Round(time.Millisecond))
	if at.Sub(killed) > 4500*time.Millisecond+time.Second {
		t.Errorf("takeover took %v, more than the lease duration plus a retry", at.Sub(killed))
	}
	// The new leader acts: a deleted pod comes back.
	kubectl(t, "delete", "pod", "leader-trainer-0", "-n", ns, "--wait=false")
	eventually(t, 30*time.Second, "the new leader recreating a pod", func() (bool, string) {
		return len(jobPods(t, ns, "leader", "trainer")) == 2 && b.metric(t, "controller_runtime_reconcile_total") > 0, ""
	})
	b.noForbidden(t)
	kubectl(t, "delete", "adamjob", "leader", "-n", ns, "--wait=false")
}

func clusterPid(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.clusterDir, "pids", name))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// The API server stopped (SIGSTOP) for longer than the lease: the leader stops reconciling at
// its renew deadline, while no request of its can finish, before the standby can start; the two
// never reconcile at once.
func TestAStalledApiServerNeverLeavesTwoLeaders(t *testing.T) {
	stopShared(t)
	a := startOperator(t, "stall-a", fastLease...)
	defer a.stop()
	a.logLine(t, "now leads", 30*time.Second)
	b := startOperator(t, "stall-b", fastLease...)
	defer b.stop()
	time.Sleep(time.Second) // b has seen the Lease
	apiserver := clusterPid(t, "kube-apiserver")
	if err := syscall.Kill(apiserver, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	time.Sleep(8 * time.Second) // twice the lease
	if err := syscall.Kill(apiserver, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	aStopped := a.logLine(t, "reconciling stopped", 10*time.Second)
	bStarted := b.logLine(t, "now leads", 30*time.Second)
	t.Logf("API server stopped at %v for 8 s; the leader stopped reconciling %v after, the standby led %v after",
		stopped.Format("15:04:05.000"), aStopped.Sub(stopped).Round(time.Millisecond), bStarted.Sub(stopped).Round(time.Millisecond))
	if !aStopped.Before(bStarted) {
		t.Errorf("two leaders: the old one stopped at %v, the new one started at %v", aStopped, bStarted)
	}
	if aStopped.Sub(stopped) > 4*time.Second {
		t.Errorf("the old leader reconciled %v into the stall, past its lease (4 s)", aStopped.Sub(stopped))
	}
	select {
	case <-a.done:
	case <-time.After(10 * time.Second):
		t.Error("the leader that lost its Lease did not exit")
	}
}

// etcd compacted under the operator while it cannot watch (it is stopped and the API server
// restarted, so its watches must resume from an old resourceVersion): it gets 410 Gone, lists
// again, and reconciles the change made in the gap.
func TestACompactedWatchIsListedAgainAndTheGapReconciled(t *testing.T) {
	stopShared(t)
	ns := namespace(t, "e2e-compact")
	o := startOperator(t, "compact", "--leader-elect=false")
	defer o.stop()
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "compact")
	createJob(t, ns, job)
	waitPhase(t, ns, "compact", "Running", 90*time.Second)
	o.signal(syscall.SIGSTOP)
	kubectl(t, "delete", "pod", "compact-data-server-0", "-n", ns, "--wait=true")
	out, err := exec.Command(filepath.Join(env.root, "tests", "cluster", "cluster.sh"), "restart", "kube-apiserver", env.clusterDir).CombinedOutput()
	if err != nil {
		o.signal(syscall.SIGCONT)
		t.Fatalf("restart the API server: %v\n%s", err, out)
	}
	compactEtcd(t)
	o.signal(syscall.SIGCONT)
	o.logLine(t, "listing again", 60*time.Second)
	eventually(t, 60*time.Second, "the data server deleted in the gap recreated", func() (bool, string) {
		return len(jobPods(t, ns, "compact", "data-server")) == 1, ""
	})
	o.noForbidden(t)
	kubectl(t, "delete", "adamjob", "compact", "-n", ns, "--wait=false")
}

// compactEtcd compacts etcd's history up to its current revision (etcd's JSON gateway).
func compactEtcd(t *testing.T) {
	t.Helper()
	etcd := env.vars["ADAM_CLUSTER_ETCD"]
	resp, err := http.Post(etcd+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"AA=="}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	var got struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	if err := json.Unmarshal(body.Bytes(), &got); err != nil || got.Header.Revision == "" {
		t.Fatalf("etcd revision: %v %s", err, body.String())
	}
	resp, err = http.Post(etcd+"/v3/kv/compaction", "application/json",
		strings.NewReader(`{"revision":"`+got.Header.Revision+`","physical":true}`))
	if err != nil {
		t.Fatal(err)
	}
	body.Reset()
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("etcd compaction: %s", body.String())
	}
	t.Logf("etcd compacted at revision %s", got.Header.Revision)
}
