package multihost

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Epochs of the jobs with faults (long enough for their fault schedule: at 5 a fast 2-core machine
// trained the server faults' job in 40 s, before its schedule's 49 s had ended; and the demo of
// the worker faults trains faster than the HA job, 7 epochs in 40 s against a schedule of 43 s).
const (
	faultEpochs       = 7
	workerFaultEpochs = 10
)

// The bottom of adam run's spread for the example after that many epochs: the lowest test
// accuracy of the `adam run`s of the same manifest that docs/notes/faults-across-hosts.md gives (13 runs at 2
// epochs, 13 at 5, on these machines), less a point. Every job must reach it, faults or not, but
// the worker faults' (checkResult). A 7-epoch job is held to the 5-epoch floor: its learning rate
// decays by the epoch whatever the total (the examples' learningRateDecay), so its first five
// epochs are those of a 5-epoch job and two more only add training.
func floor(example string, epochs int) float64 {
	lowest, ok := map[string]float64{
		"fashion-mnist/2": 0.8633, "fashion-mnist/5": 0.8842,
		"fashion-mnist-ha/2": 0.8681, "fashion-mnist-ha/5": 0.8830,
	}[fmt.Sprintf("%s/%d", example, min(epochs, 5))]
	if !ok {
		panic(fmt.Sprintf("no spread of adam run for %s at %d epochs", example, epochs))
	}
	return lowest - 0.01
}

// The bottom of adam run's spread after each epoch of 5-epoch jobs (the fault tests' first five): trainer
// 0's test accuracy after every epoch in the `adam run`s of the same manifest that
// docs/notes/faults-across-hosts.md gives (bench/spread.py, 8 runs each; the last epoch's is the floor above).
var lowestByEpoch = map[string][]float64{
	"fashion-mnist/5":    {0.7955, 0.8418, 0.8436, 0.8717},
	"fashion-mnist-ha/5": {0.8242, 0.8525, 0.8639, 0.8757},
	// The 2-epoch jobs (the probe of epoch_end_test.go): epoch 1 is the same epoch of the same
	// schedule.
	"fashion-mnist/2":    {0.7955},
	"fashion-mnist-ha/2": {0.8242},
}

// Evaluations between epochs swing wider from run to run than the final one (the job evaluates
// whatever the trainers have pushed by then). Each is compared with adam run's lowest at its
// epoch less epochMargin and the comparison logged; one under it by more than epochLost is a
// lost model (a shard re-initialised or an old checkpoint promoted at a failover: such dips took
// 8-17 points) and fails the test. Between the two is what docs/notes/faults-across-hosts.md reports as open.
const (
	epochMargin = 0.02
	epochLost   = 0.10
)

// checkEpochs compares trainer 0's evaluation after every epoch but the last (checkAccuracy's)
// with adam run's spread at that epoch.
func checkEpochs(t *testing.T, j *job, epochs int) {
	t.Helper()
	lowest, ok := lowestByEpoch[fmt.Sprintf("%s/%d", j.example, min(epochs, 5))] // floor's reason
	if !ok {
		t.Fatalf("no per-epoch spread of adam run for %s at %d epochs", j.example, epochs)
	}
	var seen, under []string
	for _, ev := range j.events(j.trainer(0), "epoch") {
		acc, ok := ev["test_accuracy"].(float64)
		e, _ := ev["epoch"].(float64)
		if !ok || int(e) < 1 || int(e) > len(lowest) {
			continue
		}
		floor := lowest[int(e)-1] - epochMargin
		seen = append(seen, fmt.Sprintf("%d: %.2f%% (%+.2f)", int(e), 100*acc, 100*(acc-floor)))
		if acc < floor {
			under = append(under, fmt.Sprintf("epoch %d", int(e)))
		}
		if acc < lowest[int(e)-1]-epochLost {
			t.Errorf("trainer 0's test accuracy after epoch %d, %.2f%%, is more than %.0f points under adam run's lowest at that epoch (%.2f%%): the job lost part of its model",
				int(e), 100*acc, 100*epochLost, 100*lowest[int(e)-1])
		}
	}
	t.Logf("trainer 0 after each epoch, against adam run's lowest at it less %.0f points: %s",
		100*epochMargin, strings.Join(seen, ", "))
	if len(under) > 0 {
		t.Logf("UNDER THE SPREAD (not a failure; docs/notes/faults-across-hosts.md): %s", strings.Join(under, ", "))
	}
	if len(seen) == 0 {
		t.Errorf("trainer 0 reported no evaluation between epochs")
	}
}

// lostModel: a job that lost its model (a shard re-initialised, a stale checkpoint promoted, a
// copy that ignored updates) or trains wrongly falls far below it; said apart from a job that
// is merely under the spread.
const lostModel = 0.80

func checkAccuracy(t *testing.T, j *job, epochs int) { checkResult(t, j, epochs, true) }

// checkResult: with `spreadHeld` false the comparison with adam run's spread is logged, not
// asserted, and only a lost model fails (the worker faults kill both trainers mid-epoch: the part
// of an epoch a trainer had not pushed is not trained again, docs/notes/faults-across-hosts.md).
func checkResult(t *testing.T, j *job, epochs int, spreadHeld bool) {
	t.Helper()
	r := j.result()
	if r.epochs != epochs {
		t.Errorf("the job ended after %d epochs, want %d", r.epochs, epochs)
	}
	checkFallBacks(t, j)
	checkPinning(t, j)
	spread := floor(j.example, epochs)
	t.Logf("test accuracy %.2f%%; adam run's lowest less a point: %.2f%% (%+.2f points)",
		100*r.accuracy, 100*spread, 100*(r.accuracy-spread))
	if r.accuracy < lostModel {
		t.Errorf("test accuracy %.2f%% is below %.0f%%: the job lost or never trained its model",
			100*r.accuracy, 100*lostModel)
	} else if r.accuracy < spread && spreadHeld {
		t.Errorf("test accuracy %.2f%% is under adam run's spread (its lowest less a point, %.2f%%)",
			100*r.accuracy, 100*spread)
	} else if r.accuracy < spread {
		t.Logf("UNDER THE SPREAD (not a failure here; docs/notes/faults-across-hosts.md): %.2f%%", 100*r.accuracy)
	}
}

// checkFallBacks: a pull that read a shard at a lower version (updates applied) than its trainer
// read before (a "shard_fell_back" event) read a state without updates the servers had applied.
// With copies, only updates not yet acknowledged may be lost at a failover: at most the one push
// each trainer has in flight, so no fall may exceed the number of trainers. A larger one is
// acknowledged work lost in the real job. Every fall is logged.
func checkFallBacks(t *testing.T, j *job) {
	t.Helper()
	trainers := j.role("trainer")
	var falls []string
	for _, p := range trainers {
		for _, ev := range j.events(p, "shard_fell_back") {
			n, _ := ev["updates"].(float64)
			falls = append(falls, fmt.Sprintf("%s shard %v from ps-%v at version %v, %.0f under %v",
				p.name, ev["shard"], ev["server"], ev["version"], n, ev["before"]))
			if int(n) > len(trainers) {
				t.Errorf("%s read shard %v from ps-%v at version %v, %.0f updates under the %v it read before: more than the %d pushes the trainers can have had in flight, so acknowledged updates were lost",
					p.name, ev["shard"], ev["server"], ev["version"], n, ev["before"], len(trainers))
			}
		}
	}
	t.Logf("pulls that read a shard below a version their trainer read before: %d %v", len(falls), falls)
}

// The cores a trainer bound its worker threads to, as it logs them.
var boundPUs = regexp.MustCompile(`bound to PUs ([0-9,]+)`)

// checkPinning: no two trainers bind their threads to the same core. Each container stands for a
// pod of its own machine but all share this machine's cores; a pod's CPU limit beside a larger
// cpuset (no static CPU manager) must leave its threads unpinned, or every trainer would pin to
// the first allowed core.
func checkPinning(t *testing.T, j *job) {
	t.Helper()
	owner := map[string]string{}
	for _, p := range j.role("trainer") {
		out, _ := exec.Command("docker", "logs", p.container).CombinedOutput()
		m := boundPUs.FindStringSubmatch(string(out))
		if m == nil {
			continue
		}
		for _, pu := range strings.Split(m[1], ",") {
			if o, ok := owner[pu]; ok {
				t.Errorf("%s and %s both bound their worker threads to PU %s", o, p.name, pu)
			}
			owner[pu] = p.name
		}
	}
}

// The jobs without faults run on real Kubernetes nodes instead (make k8s-nodes,
// tests/cluster/nodes): the demo (TestTheDemoTrainsOnRealNodes), its pods finding each other by
// cluster DNS, over mutual TLS, with their data set on a volume; and the HA example
// (TestTheHAExampleSurvivesFaultsOnRealNodes), whose parameter servers replicate on the nodes'
// second network only (checkSecondNetwork, reading inside each pod what it sent on net1 against what
// it forwarded, and its IPv4 and IPv4-mapped IPv6 connections), held to the same floors.
