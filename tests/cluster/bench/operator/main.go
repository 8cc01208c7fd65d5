// Command operator measures the Adam operator at scale on a running local control plane
// (tests/cluster/cluster.sh with many kwok nodes; bench/operator.sh starts one): it applies N
// AdamJobs at once, each the HA example grown to 3 controllers, 8 parameter servers with 3
// copies of every shard, a data server and 16 trainers (28 pods), and reports how long until
// every pod is created, scheduled and Running, the operator's CPU seconds and peak memory, its
// API requests per job, its reconcile latency, and how long deleting every job takes.
//
//	go run ./bench/operator -adam BIN -source DIR -jobs 100 -json FILE
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

const ns = "bench"

var ajGVR = schema.GroupVersionResource{Group: "adam.dev", Version: "v1alpha1", Resource: "adamjobs"}

// podTimes records when each of the job pods was first seen, bound to a node and Running.
type podTimes struct {
	mu                         sync.Mutex
	created, scheduled, runnin map[string]time.Time
}

func (p *podTimes) see(pod *corev1.Pod) {
	if pod.Labels["adam.dev/job"] == "" {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.created[pod.Name]; !ok {
		p.created[pod.Name] = now
	}
	if _, ok := p.scheduled[pod.Name]; !ok && pod.Spec.NodeName != "" {
		p.scheduled[pod.Name] = now
	}
	if _, ok := p.runnin[pod.Name]; !ok && pod.Status.Phase == corev1.PodRunning {
		p.runnin[pod.Name] = now
	}
}

// claimTimes records when each volume claim of the jobs was first seen Bound.
type claimTimes struct {
	mu    sync.Mutex
	bound map[string]time.Time
}

func (c *claimTimes) see(pvc *corev1.PersistentVolumeClaim) {
	if pvc.Status.Phase != corev1.ClaimBound {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.bound[pvc.Name]; !ok {
		c.bound[pvc.Name] = time.Now()
	}
}

func (c *claimTimes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bound)
}

func (p *podTimes) counts() (int, int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.created), len(p.scheduled), len(p.runnin)
}

// last is the latest time in m, as seconds after t0.
func last(m map[string]time.Time, t0 time.Time) float64 {
	var l time.Time
	for _, t := range m {
		if t.After(l) {
			l = t
		}
	}
	return l.Sub(t0).Seconds()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-operator:", err)
		os.Exit(1)
	}
}

// scrape reads the operator's /metrics: counter and histogram samples by name and labels.
func scrape(url string) map[string]float64 {
	resp, err := http.Get(url)
	must(err)
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 1<<16)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	out := map[string]float64{}
	for _, line := range strings.Split(b.String(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// quantile of the reconcile-time histogram, interpolated within its bucket as Prometheus'
// histogram_quantile does.
func quantile(m map[string]float64, q float64) float64 {
	re := regexp.MustCompile(`^controller_runtime_reconcile_time_seconds_bucket\{.*le="([^"]+)".*\}$`)
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range m {
		if s := re.FindStringSubmatch(k); s != nil {
			le, _ := strconv.ParseFloat(s[1], 64)
			if s[1] == "+Inf" {
				le = math.Inf(1)
			}
			bs = append(bs, bucket{le, v})
		}
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return 0
	}
	rank := q * bs[len(bs)-1].n
	prevLe, prevN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/math.Max(b.n-prevN, 1)
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe
}

func sum(m map[string]float64, prefix string, filter func(string) bool) float64 {
	t := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) && filter(k) {
			t += v
		}
	}
	return t
}

// procStats: CPU seconds (user + system) and peak resident memory (MB) of a process.
func procStats(pid int) (float64, float64) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	must(err)
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(err)
	hwm := 0.0
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			hwm = kb / 1024
		}
	}
	return (utime + stime) / 100, hwm // USER_HZ is 100 on Linux
}

func main() {
	adam := flag.String("adam", "", "the adam binary (runs the operator)")
	source := flag.String("source", "", "the repository (examples/, charts/)")
	jobs := flag.Int("jobs", 100, "AdamJobs applied at once")
	out := flag.String("json", "", "write the results here as JSON")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up waiting after this long")
	qps := flag.Int("operator-qps", 0, "the operator's --kube-api-qps, its burst twice that (0: its defaults)")
	extra := flag.String("operator-args", "", "more arguments of the operator, space-separated")
	flag.Parse()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	must(err)
	cfg.QPS, cfg.Burst = 500, 1000
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	kubectl := func(args ...string) {
		cmd := exec.Command("kubectl", args...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		must(cmd.Run())
	}
	kubectl("apply", "--server-side", "-f", filepath.Join(*source, "charts/adam/files/adam.dev_adamjobs.yaml"))
	kubectl("wait", "--for=condition=Established", "crd/adamjobs.adam.dev", "--timeout=60s")
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	must(err)

	// The operator, as the chart runs it (its own defaults unless -operator-qps), with a metrics port.
	args := []string{"operator", "--kubeconfig", os.Getenv("KUBECONFIG"),
		"--metrics-bind-address", "127.0.0.1:18080", "--leader-election-namespace", ns}
	if *qps > 0 {
		args = append(args, "--kube-api-qps", strconv.Itoa(*qps), "--kube-api-burst", strconv.Itoa(2**qps))
	}
	args = append(args, strings.Fields(*extra)...)
	op := exec.Command(*adam, args...)
	logf, err := os.Create(filepath.Join(os.TempDir(), "bench-operator.log"))
	must(err)
	op.Stdout, op.Stderr = logf, logf
	must(op.Start())
	defer op.Process.Kill()
	metricsURL := "http://127.0.0.1:18080/metrics"
	for i := 0; ; i++ {
		if r, err := http.Get("http://127.0.0.1:18080/readyz"); err == nil && r.StatusCode == 200 {
			break
		}
		if i > 300 {
			must(fmt.Errorf("the operator is not ready after 30 s; see %s", logf.Name()))
		}
		time.Sleep(100 * time.Millisecond)
	}

	times := &podTimes{created: map[string]time.Time{}, scheduled: map[string]time.Time{}, runnin: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	pods := factory.Core().V1().Pods().Informer()
	pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { times.see(o.(*corev1.Pod)) },
		UpdateFunc: func(_, o any) { times.see(o.(*corev1.Pod)) },
	})
	claims := &claimTimes{bound: map[string]time.Time{}}
	pvcs := factory.Core().V1().PersistentVolumeClaims().Informer()
	pvcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { claims.see(o.(*corev1.PersistentVolumeClaim)) },
		UpdateFunc: func(_, o any) { claims.see(o.(*corev1.PersistentVolumeClaim)) },
	})
	stop := make(chan struct{})
	factory.Start(stop)
	cache.WaitForCacheSync(stop, pods.HasSynced, pvcs.HasSynced)

	// The job: the HA example grown to the size.
	text, err := os.ReadFile(filepath.Join(*source, "examples/fashion-mnist-ha.yaml"))
	must(err)
	var base map[string]any
	must(yaml.Unmarshal(text, &base))
	roles := base["spec"].(map[string]any)["roles"].(map[string]any)
	roles["controller"] = map[string]any{"replicas": 3}
	roles["parameterServer"] = map[string]any{"replicas": 8, "copies": 3, "shardBytes": 262144}
	roles["trainer"] = map[string]any{"replicas": 16, "threads": 1}
	const podsPerJob = 3 + 8 + 1 + 16
	const claimsPerJob = 3 + 8 // the controllers' Raft logs, the parameter servers' checkpoints
	want := *jobs * podsPerJob
	before := scrape(metricsURL)
	cpu0, _ := procStats(op.Process.Pid)

	fmt.Fprintf(os.Stderr, "bench-operator: %d nodes; applying %d AdamJobs (%d pods)\n", len(nodes.Items), *jobs, want)
	t0 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < *jobs; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			b, _ := json.Marshal(base)
			must(json.Unmarshal(b, &obj.Object))
			obj.SetName(fmt.Sprintf("job-%03d", i))
			obj.SetNamespace(ns)
			_, err := dyn.Resource(ajGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
			must(err)
		}(i)
	}
	wg.Wait()
	applied := time.Since(t0).Seconds()
	deadline := t0.Add(*timeout)
	for {
		c, s, r := times.counts()
		fmt.Fprintf(os.Stderr, "bench-operator: %5.1f s: %d created, %d scheduled, %d Running of %d pods; %d of %d claims bound\n",
			time.Since(t0).Seconds(), c, s, r, want, claims.count(), *jobs*claimsPerJob)
		if r >= want {
			break
		}
		if time.Now().After(deadline) {
			must(fmt.Errorf("not every pod Running after %v; see %s", *timeout, logf.Name()))
		}
		time.Sleep(2 * time.Second)
	}
	times.mu.Lock()
	created, scheduled, running := last(times.created, t0), last(times.scheduled, t0), last(times.runnin, t0)
	times.mu.Unlock()
	claims.mu.Lock()
	bound := last(claims.bound, t0)
	claims.mu.Unlock()
	time.Sleep(5 * time.Second) // the status writes that follow Running
	after := scrape(metricsURL)
	cpu1, peak := procStats(op.Process.Pid)
	requests := func(m map[string]float64, methods ...string) float64 {
		return sum(m, "rest_client_requests_total{", func(k string) bool {
			for _, meth := range methods {
				if strings.Contains(k, `method="`+meth+`"`) {
					return true
				}
			}
			return false
		})
	}
	writes := requests(after, "POST", "PUT", "PATCH", "DELETE") - requests(before, "POST", "PUT", "PATCH", "DELETE")
	all := requests(after, "GET", "POST", "PUT", "PATCH", "DELETE") - requests(before, "GET", "POST", "PUT", "PATCH", "DELETE")
	// The objects the operator creates per job: 2 Secrets, ConfigMap, Service, NetworkPolicy,
	// StatefulSet, 8 checkpoint claims, 8 + 1 + 16 pods (the controllers' pods are the
	// StatefulSet controller's).
	const objectsPerJob = 2 + 4 + 8 + 25

	t1 := time.Now()
	must(dyn.Resource(ajGVR).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}))
	for {
		left, err := dyn.Resource(ajGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		must(err)
		podList, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		must(err)
		if len(left.Items) == 0 && len(podList.Items) == 0 {
			break
		}
		fmt.Fprintf(os.Stderr, "bench-operator: deleting: %d jobs, %d pods left\n", len(left.Items), len(podList.Items))
		if time.Since(t1) > *timeout {
			must(fmt.Errorf("jobs or pods left after %v", *timeout))
		}
		time.Sleep(2 * time.Second)
	}
	cleanup := time.Since(t1).Seconds()
	cpu2, peak2 := procStats(op.Process.Pid)
	close(stop)

	res := map[string]any{
		"nodes": len(nodes.Items), "jobs": *jobs, "pods": want,
		"applied_s": applied, "claims_bound_s": bound, "created_s": created, "scheduled_s": scheduled, "running_s": running,
		"pods_per_s":                float64(want) / running,
		"operator_cpu_s_to_running": cpu1 - cpu0, "operator_cpu_s_total": cpu2 - cpu0,
		"operator_peak_mb":     math.Max(peak, peak2),
		"api_requests_per_job": all / float64(*jobs), "api_writes_per_job": writes / float64(*jobs),
		"objects_per_job":       objectsPerJob,
		"writes_beyond_objects": writes/float64(*jobs) - objectsPerJob,
		"reconcile_p50_s":       quantile(after, 0.5),
		"reconcile_p99_s":       quantile(after, 0.99),
		"reconciles":            sum(after, "controller_runtime_reconcile_total{", func(string) bool { return true }),
		"cleanup_s":             cleanup,
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(b))
	if *out != "" {
		must(os.WriteFile(*out, b, 0o644))
	}
}
