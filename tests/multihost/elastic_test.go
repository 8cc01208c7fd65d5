package multihost

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// Elastic parameter servers across hosts: the HA example's servers and controllers run, each in
// its own container; its manifest (the ConfigMap every pod mounts) is rewritten with a fourth
// server, whose pod starts as the operator would start it, while the trainers make tagged pushes
// (`adam trainer --check-pushes`, as in TestNoAcknowledgedUpdateIsLost); then with three again,
// and the fourth exits 0 by itself once the controller moved its copies away. Through both, no
// acknowledged push is lost or applied twice and every copy agrees with its primary; the
// controller leader reports each rebalance (copies moved, seconds).
func TestServersJoinAndLeaveWithoutLosingAnAcknowledgedUpdate(t *testing.T) {
	j := newJob(t, "fashion-mnist-ha")
	j.startServing()
	const pushes = 150
	var total checkCounts
	for r, servers := range []int{4, 3} {
		trainers := j.startChecks(r, pushes)
		time.Sleep(time.Second) // the resize lands mid-round: a fault's timing
		j.scaleServers(servers)
		got := j.waitChecks(trainers, 3*time.Minute)
		j.logf("round %d, %d servers: %s", r, servers, got)
		if got.lost+got.twice+got.disagree > 0 || got.reports != len(trainers) {
			t.Errorf("round %d (%d servers): %s", r, servers, got)
		}
		total.add(got)
		ev := j.waitRebalanced(servers, time.Minute)
		j.logf("rebalanced over %d servers in %.2f s: %v of %v copies moved, %v primaries handed over",
			servers, ev["seconds"], ev["copies_moved"], ev["copies"], ev["handoffs"])
	}
	leaving := j.pod("ps-3")
	j.waitEvent(leaving, "retired", time.Minute)
	deadline := time.Now().Add(30 * time.Second)
	for {
		running, code := j.state(leaving)
		if !running {
			if code != 0 {
				t.Errorf("the retired server exited %d:\n%s", code, j.tail(leaving, 30))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retired server still runs:\n%s", j.tail(leaving, 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("a server joined and left: %s", total)
}

// scaleServers rewrites the manifest every pod mounts with n parameter servers (whole, by a
// rename, as the kubelet swaps a ConfigMap) and starts the server pods it adds, as the operator
// does: their containers made from `adam render` of the new manifest.
func (j *job) scaleServers(n int) {
	j.t.Helper()
	path := filepath.Join(j.dir, "job", "job.yaml")
	text, err := os.ReadFile(path)
	must(j.t, err)
	re := regexp.MustCompile(`parameterServer: \{replicas: \d+`)
	if !re.Match(text) {
		j.t.Fatalf("the manifest has no flow-style parameterServer.replicas")
	}
	manifest := re.ReplaceAllString(string(text), fmt.Sprintf("parameterServer: {replicas: %d", n))
	must(j.t, os.WriteFile(path+".tmp", []byte(manifest), 0o644))
	must(j.t, os.Rename(path+".tmp", path))
	out, err := exec.Command(env.binary, "render", "-o", "json", path).Output()
	if err != nil {
		j.t.Fatalf("adam render: %v", err)
	}
	var objects []map[string]any
	must(j.t, json.Unmarshal(out, &objects))
	for _, o := range objects {
		md, _ := o["metadata"].(map[string]any)
		spec, _ := o["spec"].(map[string]any)
		if o["kind"] != "Pod" || j.byName[md["name"].(string)] != nil {
			continue
		}
		j.addPod(md["name"].(string), md, spec, spec["hostname"].(string), spec["subdomain"].(string))
		p := j.pods[len(j.pods)-1]
		j.create(p)
		j.waitEvent(p, "ready", 2*time.Minute)
		j.logf("%s started: the job has %d parameter servers", p.name, n)
	}
}

// waitRebalanced waits for a controller's "rebalanced" event over n servers.
func (j *job) waitRebalanced(n int, limit time.Duration) map[string]any {
	j.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		for _, c := range j.role("controller") {
			for _, ev := range j.events(c, "rebalanced") {
				if s, _ := ev["servers"].(float64); int(s) == n {
					return ev
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	j.t.Fatalf("no controller reported a rebalance over %d servers in %v", n, limit)
	return nil
}
