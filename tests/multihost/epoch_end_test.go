package multihost

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// One parameter-server fault timed to trainer 0's end of epoch 1, when it pulls the model it
// evaluates: the HA example for 2 epochs, the primary of most shards cut off from the controllers
// (not from the trainers) for 8 s, paused 3 s, or killed and back 5 s later. Trainer 0's
// evaluation after epoch 1 is logged and held to the lost-model line (checkEpochs), the final one
// to the floor. A probe of the one dip docs/notes/faults-across-hosts.md leaves open,
// not part of `make multihost`:
//
//	MULTIHOST_EPOCH_END=cut MULTIHOST_RUN=TestAFaultAtTheEndOfEpochOne tests/multihost/run.sh
//
// MULTIHOST_EPOCH_END is cut, pause, kill, none (the same job without a fault) or sequence: the
// server-fault test's order, as in the run that read 77.05% (the primary killed and back 5 s
// later, then a primary paused 3 s, early in epoch 1), then the cut at the end of it;
// MULTIHOST_EPOCH_END_BEFORE is how many images before the end of trainer 0's share the fault
// starts (1500 by default: 2-3 s on a 2-core machine).
func TestAFaultAtTheEndOfEpochOne(t *testing.T) {
	mode := os.Getenv("MULTIHOST_EPOCH_END")
	switch mode {
	case "":
		t.Skip("a probe: set MULTIHOST_EPOCH_END to cut, pause, kill or none")
	case "cut", "pause", "kill", "none", "sequence":
	default:
		t.Fatalf("MULTIHOST_EPOCH_END=%q: want cut, pause, kill, none or sequence", mode)
	}
	before, err := strconv.Atoi(getenv("MULTIHOST_EPOCH_END_BEFORE", "1500"))
	if err != nil || before < 0 || before >= shareOfEpoch {
		t.Fatalf("MULTIHOST_EPOCH_END_BEFORE=%q: want a count of images under %d",
			os.Getenv("MULTIHOST_EPOCH_END_BEFORE"), shareOfEpoch)
	}
	const epochs = 2
	j := newJob(t, "fashion-mnist-ha", edit{"epochs", strconv.Itoa(epochs)})
	j.run(8*time.Minute, func() {
		if mode == "none" {
			return
		}
		if mode == "sequence" {
			j.settle(8 * time.Second)
			if p := j.primaryServer(); p != nil {
				j.kill(p)
				j.restart(p, 5*time.Second)
			}
			j.settle(6 * time.Second)
			if p := j.primaryServer(); p != nil && j.try("pause", p.container) {
				time.Sleep(3 * time.Second)
				j.try("unpause", p.container)
			}
		}
		at := float64(shareOfEpoch - before)
		if _, _, ok := j.waitMetric(j.trainer(0), "adam_trainer_images_total",
			func(v float64) bool { return v >= at }, 4*time.Minute); !ok {
			j.t.Errorf("trainer-0 did not reach image %.0f of epoch 1 within 4 min", at)
			return
		}
		p := j.primaryServer()
		if p == nil {
			j.t.Errorf("no parameter server reports primary shards")
			return
		}
		j.logf("%s of %s at trainer-0's image %.0f", mode, p.name, at)
		switch mode {
		case "cut", "sequence":
			if j.cut(p, j.role("controller")) {
				time.Sleep(8 * time.Second)
				j.heal(p)
			}
		case "pause":
			if j.try("pause", p.container) {
				time.Sleep(3 * time.Second)
				j.try("unpause", p.container)
			}
		case "kill":
			j.kill(p)
			j.restart(p, 5*time.Second)
		}
	})
	checkAccuracy(t, j, epochs)
	checkEpochs(t, j, epochs)
}

// shareOfEpoch: the images trainer 0 trains in an epoch of the HA example (60,000, two trainers).
const shareOfEpoch = 30000
