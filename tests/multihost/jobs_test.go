package multihost

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// Epochs of the jobs without faults, and of those with (long enough for their fault schedule).
const (
	jobEpochs   = 2
	faultEpochs = 5
)

// The accuracy a job of the example must reach after that many epochs: the lowest test
// accuracy of the `adam run`s of the same manifest that docs/reliability.md gives (3 to 7 runs
// on these machines), less a point. ADAM_MULTIHOST_FLOOR sets another.
func floor(example string, epochs int) float64 {
	if v, err := strconv.ParseFloat(os.Getenv("ADAM_MULTIHOST_FLOOR"), 64); err == nil {
		return v
	}
	lowest := map[string]float64{
		"fashion-mnist/2": 0.868, "fashion-mnist/5": 0.8839,
		"fashion-mnist-ha/2": 0.8548, "fashion-mnist-ha/5": 0.883,
	}[fmt.Sprintf("%s/%d", example, epochs)]
	return lowest - 0.01
}

func checkAccuracy(t *testing.T, j *job, epochs int) {
	t.Helper()
	r := j.result()
	if r.epochs != epochs {
		t.Errorf("the job ended after %d epochs, want %d", r.epochs, epochs)
	}
	if want := floor(j.example, epochs); r.accuracy < want {
		t.Errorf("test accuracy %.2f%% is below %.2f%%, the lowest of adam run's at %d epochs less a point",
			100*r.accuracy, 100*want, epochs)
	}
}

// faultFloor is what a job with faults must reach for now: a job that lost its model (a shard
// re-initialised, a stale checkpoint promoted) falls far below it. Issue 18's goal, the spread
// of adam run (floor above), is not met yet: one run in four of the server faults ended 3-4
// points low (docs/reliability.md); the gap is logged in every run.
const faultFloor = 0.80

func checkAccuracyAfterFaults(t *testing.T, j *job, epochs int) {
	t.Helper()
	r := j.result()
	if r.epochs != epochs {
		t.Errorf("the job ended after %d epochs, want %d", r.epochs, epochs)
	}
	spread := floor(j.example, epochs)
	t.Logf("test accuracy %.2f%% after the faults; adam run's lowest less a point: %.2f%% (%+.2f points)",
		100*r.accuracy, 100*spread, 100*(r.accuracy-spread))
	if r.accuracy < faultFloor {
		t.Errorf("test accuracy %.2f%% after the faults is below %.0f%%: the faults lost the model",
			100*r.accuracy, 100*faultFloor)
	}
}

// The demo (no copies): two parameter servers, a data server and two trainers, each in its own
// container, finding each other by their pods' DNS names, over mutual TLS.
func TestTheDemoAcrossHosts(t *testing.T) {
	j := newJob(t, "fashion-mnist", edit{"epochs", strconv.Itoa(jobEpochs)})
	j.run(8*time.Minute, nil)
	checkAccuracy(t, j, jobEpochs)
}

// The HA example: three controllers, three parameter servers holding three copies of every
// shard, forwarding to each other on the second network only.
func TestTheHAExampleReplicatesOnTheSecondNetworkOnly(t *testing.T) {
	j := newJob(t, "fashion-mnist-ha", edit{"epochs", strconv.Itoa(jobEpochs)})
	j.run(8*time.Minute, nil)
	checkAccuracy(t, j, jobEpochs)
	checkReplicationNetwork(t, j)
}

// checkReplicationNetwork: every parameter server forwarded shards, the bytes left through its
// interface on the second network (its counter there is at least what it forwarded), and no
// two parameter servers hold a connection between their addresses on the pod network.
func checkReplicationNetwork(t *testing.T, j *job) {
	t.Helper()
	primaryIPs := map[string]string{}
	for _, p := range j.pods {
		if p.role == "ps" {
			primaryIPs[j.address(p, j.primary)] = p.name
		}
	}
	for _, p := range j.pods {
		if p.role != "ps" {
			continue
		}
		m := j.metrics(p)
		forwarded := m["adam_ps_forwarded_bytes_total"]
		ifs := j.interfaces(p)
		repl, pods := ifs[j.replication], ifs[j.primary]
		j.logf("%s: forwarded %.1f MB; second network rx %.1f MB tx %.1f MB; pod network rx %.1f MB tx %.1f MB",
			p.name, forwarded/1e6, float64(repl[0])/1e6, float64(repl[1])/1e6, float64(pods[0])/1e6, float64(pods[1])/1e6)
		if forwarded <= 0 {
			t.Errorf("%s forwarded nothing to its copies", p.name)
		}
		if float64(repl[1]) < forwarded {
			t.Errorf("%s forwarded %.0f bytes but sent only %d on the second network", p.name, forwarded, repl[1])
		}
		for _, c := range j.connections(p) {
			if from, ok := primaryIPs[c[0]]; ok {
				if to, ok := primaryIPs[c[1]]; ok {
					t.Errorf("%s and %s talk over the pod network (%s -> %s)", from, to, c[0], c[1])
				}
			}
		}
	}
}
