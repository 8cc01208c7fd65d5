package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// podLog records, in the order the API server reported them, when each pod of a namespace
// appeared and became Ready.
type podLog struct {
	mu     sync.Mutex
	events []string // "ADDED ps fashion-mnist-ha-ps-0", "READY controller ..."
	ready  map[string]bool
	stop   func()
}

func watchPods(t *testing.T, ns string) *podLog {
	t.Helper()
	w, err := env.cs.CoreV1().Pods(ns).Watch(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := &podLog{ready: map[string]bool{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			role := p.Labels["adam.dev/role"]
			l.mu.Lock()
			if ev.Type == watch.Added {
				l.events = append(l.events, "ADDED "+role+" "+p.Name)
			}
			if podReady(p) && !l.ready[p.Name] {
				l.ready[p.Name] = true
				l.events = append(l.events, "READY "+role+" "+p.Name)
			}
			l.mu.Unlock()
		}
	}()
	return l
}

// first returns the index of the first event starting with `prefix`, or -1.
func (l *podLog) first(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, e := range l.events {
		if strings.HasPrefix(e, prefix) {
			return i
		}
	}
	return -1
}

// readyAll returns the index at which the n-th pod of `role` became Ready, or -1.
func (l *podLog) readyAll(role string, n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := 0
	for i, e := range l.events {
		if strings.HasPrefix(e, "READY "+role+" ") {
			if seen++; seen == n {
				return i
			}
		}
	}
	return -1
}

// Both examples, as a user applies them, in namespaces that enforce the restricted Pod Security
// standard: the API server admits every pod, the real scheduler places every pod (copies of a shard
// and controller members on different nodes, spread over the zones, Guaranteed QoS), kwok runs
// them, the operator starts the stages in order, `kubectl get aj` shows the phase and `kubectl
// wait` works on the documented conditions; trainers that exit 0 finish the job.
func testExamplesRunStageByStageOnTheRealScheduler(t *testing.T) {
	sharedOperator(t)
	for _, c := range []struct {
		example     string
		controllers int
		servers     int
	}{{"fashion-mnist", 0, 2}, {"fashion-mnist-ha", 3, 3}} {
		t.Run(c.example, func(t *testing.T) {
			ns := namespace(t, "e2e-"+c.example)
			// Every pod of the examples meets the restricted Pod Security standard: the API
			// server refuses a pod that does not (a hostPath data set, say: k8s-nodes).
			kubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
			log := watchPods(t, ns)
			defer log.stop()
			kubectl(t, "apply", "-n", ns, "-f", "examples/"+c.example+".yaml")
			kubectl(t, "wait", "-n", ns, "--for=condition=Running", "adamjob/"+c.example, "--timeout=90s")
			out := kubectl(t, "get", "aj", "-n", ns)
			if !strings.Contains(out, "PHASE") || !strings.Contains(out, "Running") {
				t.Errorf("kubectl get aj:\n%s", out)
			}
			kubectl(t, "wait", "-n", ns, "--for=condition=Created", "adamjob/"+c.example, "--timeout=10s")

			// Stages: controllers first; servers once every controller is Ready; data server
			// and trainers once every server is Ready.
			ps, trainer, data := log.first("ADDED ps "), log.first("ADDED trainer "), log.first("ADDED data-server ")
			if ps < 0 || trainer < 0 || data < 0 {
				t.Fatalf("pods missing from the watch: %v", log.events)
			}
			if c.controllers > 0 {
				if r := log.readyAll("controller", c.controllers); r < 0 || r > ps {
					t.Errorf("parameter servers created before every controller was Ready: %v", log.events)
				}
			}
			if r := log.readyAll("ps", c.servers); r < 0 || r > trainer || r > data {
				t.Errorf("trainers or data server created before every parameter server was Ready: %v", log.events)
			}

			// Placement by the real scheduler.
			zones := map[string]string{}
			nodes, _ := env.cs.CoreV1().Nodes().List(ctx(), metav1.ListOptions{})
			for _, n := range nodes.Items {
				zones[n.Name] = n.Labels["topology.kubernetes.io/zone"]
			}
			for _, role := range []string{"ps", "controller"} {
				seenNode, seenZone := map[string]bool{}, map[string]bool{}
				pods := jobPods(t, ns, c.example, role)
				for _, p := range pods {
					if p.Spec.NodeName == "" {
						t.Errorf("%s not scheduled", p.Name)
					}
					if p.Status.QOSClass != corev1.PodQOSGuaranteed {
						t.Errorf("%s: QoS %s, want Guaranteed (numaPinning)", p.Name, p.Status.QOSClass)
					}
					if c.controllers > 0 && seenNode[p.Spec.NodeName] {
						t.Errorf("two %s pods on node %s: copies must not share a machine", role, p.Spec.NodeName)
					}
					seenNode[p.Spec.NodeName] = true
					seenZone[zones[p.Spec.NodeName]] = true
				}
				if len(pods) >= 3 && len(seenZone) < 3 {
					t.Errorf("%d %s pods in %d zones, want them spread over 3", len(pods), role, len(seenZone))
				}
			}

			// The trainers exit 0: the job succeeds and the running pods are cleaned up.
			for _, p := range jobPods(t, ns, c.example, "trainer") {
				exitPod(t, ns, p.Name, 0, "")
			}
			kubectl(t, "wait", "-n", ns, "--for=condition=Succeeded", "adamjob/"+c.example, "--timeout=60s")
			eventually(t, 30*time.Second, "running pods cleaned up (cleanPodPolicy Running)", func() (bool, string) {
				left := 0
				for _, p := range jobPods(t, ns, c.example, "") {
					if p.Status.Phase == corev1.PodRunning {
						left++
					}
				}
				return left == 0, fmt.Sprintf("%d running", left)
			})
		})
	}
}

// spec.roles.trainer.modelWorkers: a split replica's model worker is a pod of its own role,
// placed by the real scheduler on its trainer's node, dialled at the name the trainer is given;
// a model worker that crashes takes its running trainer with it (the replica starts again
// whole, one restart counted), and the new pair is placed together again; the job ends with its
// trainer, not with its model worker.
func testASplitReplicaIsPlacedWithItsTrainer(t *testing.T) {
	sharedOperator(t)
	const name = "fashion-mnist-split"
	ns := namespace(t, "e2e-split")
	kubectl(t, "apply", "-n", ns, "-f", "examples/"+name+".yaml")
	kubectl(t, "wait", "-n", ns, "--for=condition=Running", "adamjob/"+name, "--timeout=90s")
	var trainer, worker corev1.Pod
	eventually(t, 60*time.Second, "trainer and model worker scheduled", func() (bool, string) {
		ts, ws := jobPods(t, ns, name, "trainer"), jobPods(t, ns, name, "model-worker")
		if len(ts) != 1 || len(ws) != 1 {
			return false, fmt.Sprintf("%d trainers, %d model workers", len(ts), len(ws))
		}
		trainer, worker = ts[0], ws[0]
		return trainer.Spec.NodeName != "" && worker.Spec.NodeName != "",
			trainer.Spec.NodeName + " / " + worker.Spec.NodeName
	})
	if worker.Name != name+"-trainer-0-w1" {
		t.Errorf("model worker pod %s", worker.Name)
	}
	if worker.Spec.NodeName != trainer.Spec.NodeName {
		t.Errorf("model worker on %s, its trainer on %s: want one node", worker.Spec.NodeName, trainer.Spec.NodeName)
	}
	args := strings.Join(worker.Spec.Containers[0].Args, " ")
	want := "--model-workers " + name + "-trainer-0." + name + ":7070," + name + "-trainer-0-w1." + name + ":7070"
	if !strings.Contains(args, want) || !strings.Contains(args, "--model-worker 1") {
		t.Errorf("model worker args %q, want %q and --model-worker 1", args, want)
	}

	exitPod(t, ns, worker.Name, 137, "")
	newWorker := readyPod(t, ns, worker.Name, worker.UID, 90*time.Second)
	newTrainer := readyPod(t, ns, trainer.Name, trainer.UID, 90*time.Second)
	if newWorker.Spec.NodeName != newTrainer.Spec.NodeName {
		t.Errorf("replaced model worker on %s, its trainer on %s: want one node", newWorker.Spec.NodeName, newTrainer.Spec.NodeName)
	}
	if r := statusInt(getJob(t, ns, name), "restarts"); r != 1 {
		t.Errorf("%d restarts for one crash of a replica, want 1", r)
	}
	if ok, why := hasEvent(t, ns, name, "ReplicaRestarting", trainer.Name+" "); !ok {
		t.Errorf("no ReplicaRestarting event naming %s: %s", trainer.Name, why)
	}
	exitPod(t, ns, trainer.Name, 0, "")
	kubectl(t, "wait", "-n", ns, "--for=condition=Succeeded", "adamjob/"+name, "--timeout=60s")
}

// The tests that share the operator and leave the cluster as they found it run at once: most of
// their time is waiting for the cluster. (Faults that take nodes or operators away run alone.)
func TestJobsWithTheSharedOperator(t *testing.T) {
	sharedOperator(t)
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"ExamplesRunStageByStageOnTheRealScheduler", testExamplesRunStageByStageOnTheRealScheduler},
		{"TooFewNodesIsExplainedWithin30s", testTooFewNodesIsExplainedWithin30s},
		{"TheApiServerRefusesEveryDocumentedBadManifest", testTheApiServerRefusesEveryDocumentedBadManifest},
		{"RenderedObjectsPassStrictServerValidation", testRenderedObjectsPassStrictServerValidation},
		{"ShardLayoutFieldsAreImmutableTheirPresenceIncluded", testShardLayoutFieldsAreImmutableTheirPresenceIncluded},
		{"DeleteFlushesThenTheGarbageCollectorTakesTheRest", testDeleteFlushesThenTheGarbageCollectorTakesTheRest},
		{"AStuckParameterServerHoldsTheDeletionOnlyUntilTheFlushTimeout", testAStuckParameterServerHoldsTheDeletionOnlyUntilTheFlushTimeout},
		{"ARecreatedJobDoesNotAdoptItsPredecessorsObjects", testARecreatedJobDoesNotAdoptItsPredecessorsObjects},
		{"VolumesGoWhereTheManifestSays", testVolumesGoWhereTheManifestSays},
		{"PodTemplatesReachEveryPodAndTheScheduler", testPodTemplatesReachEveryPodAndTheScheduler},
		{"ASidecarDoesNotKeepTheJobFromFinishing", testASidecarDoesNotKeepTheJobFromFinishing},
		{"FailureRulesDecideWhatAFailedPodMeans", testFailureRulesDecideWhatAFailedPodMeans},
		{"KubectlScaleChangesTheTrainers", testKubectlScaleChangesTheTrainers},
		{"EditingTheServerCountAddsAndRetiresServers", testEditingTheServerCountAddsAndRetiresServers},
		{"ASplitReplicaIsPlacedWithItsTrainer", testASplitReplicaIsPlacedWithItsTrainer},
		{"AnotherClientsChangeIsPutBack", testAnotherClientsChangeIsPutBack},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.test(t)
		})
	}
}

// spec.dataset.volume reaches the data server's pod only, read-only; spec.output.volume trainer
// 0's only, which is told to write the model there; once the trainers exit 0 the job's status
// says where the model is.
func testVolumesGoWhereTheManifestSays(t *testing.T) {
	sharedOperator(t)
	ns := namespace(t, "e2e-volumes")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "volumes")
	for _, f := range []string{"train/images", "train/labels", "test/images", "test/labels"} {
		parts := strings.Split(f, "/")
		d := job["spec"].(map[string]any)["dataset"].(map[string]any)[parts[0]].(map[string]any)
		d[parts[1]] = strings.Replace(d[parts[1]].(string), "/usr/share/datasets/fashion-mnist/", "/mnt/fm/", 1)
	}
	set(job, "spec/dataset/volume", map[string]any{"hostPath": map[string]any{"path": "/srv/fashion-mnist", "type": "Directory"}})
	set(job, "spec/dataset/mountPath", "/mnt/fm")
	nfs := map[string]any{"nfs": map[string]any{"server": "nfs.example", "path": "/models"}}
	set(job, "spec/output/volume", nfs)
	set(job, "spec/output/everyEpochs", int64(4))
	createJob(t, ns, job)
	waitPhase(t, ns, "volumes", "Running", 90*time.Second)
	eventually(t, 60*time.Second, "the data server and the trainers", func() (bool, string) {
		return len(jobPods(t, ns, "volumes", "data-server")) == 1 && len(jobPods(t, ns, "volumes", "trainer")) == 2, ""
	})
	for _, p := range jobPods(t, ns, "volumes", "") {
		var dataset, output *corev1.Volume
		for i := range p.Spec.Volumes {
			switch p.Spec.Volumes[i].Name {
			case "dataset":
				dataset = &p.Spec.Volumes[i]
			case "output":
				output = &p.Spec.Volumes[i]
			}
		}
		mounts := map[string]corev1.VolumeMount{}
		for _, m := range p.Spec.Containers[0].VolumeMounts {
			mounts[m.Name] = m
		}
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		isData, isTrainer0 := p.Name == "volumes-data-server-0", p.Name == "volumes-trainer-0"
		if (dataset != nil) != isData {
			t.Errorf("%s: dataset volume %v", p.Name, dataset)
		}
		if isData && (dataset.HostPath == nil || dataset.HostPath.Path != "/srv/fashion-mnist" ||
			mounts["dataset"].MountPath != "/mnt/fm" || !mounts["dataset"].ReadOnly) {
			t.Errorf("%s: dataset volume %+v mounted %+v, want /srv/fashion-mnist read-only at /mnt/fm", p.Name, dataset, mounts["dataset"])
		}
		if (output != nil) != isTrainer0 {
			t.Errorf("%s: output volume %v", p.Name, output)
		}
		if isTrainer0 && (output.NFS == nil || output.NFS.Server != "nfs.example" ||
			mounts["output"].MountPath != "/output" || mounts["output"].ReadOnly ||
			!strings.Contains(args, "--model-out /output/volumes.onnx")) {
			t.Errorf("%s: output volume %+v mounted %+v, args %s", p.Name, output, mounts["output"], args)
		}
	}
	for _, p := range jobPods(t, ns, "volumes", "trainer") {
		exitPod(t, ns, p.Name, 0, "")
	}
	waitPhase(t, ns, "volumes", "Succeeded", 60*time.Second)
	model, _, _ := unstructured.NestedMap(getJob(t, ns, "volumes").Object, "status", "model")
	if fmt.Sprint(model["file"]) != "volumes.onnx" || fmt.Sprint(model["volume"]) != fmt.Sprint(nfs) {
		t.Errorf("status.model = %v, want file volumes.onnx on %v", model, nfs)
	}
	kubectl(t, "delete", "adamjob", "volumes", "-n", ns, "--wait=false")
}
