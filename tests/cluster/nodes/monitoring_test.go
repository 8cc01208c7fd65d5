package nodes

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// prometheus is a Prometheus server (built from its module by tests/cluster/build.sh, with its
// Kubernetes service discovery: Debian's package has none) on this machine that finds the job pods
// and the operator's pods through the Kubernetes API (kubernetes_sd_configs), as the chart's
// PodMonitor and ServiceMonitor direct a Prometheus Operator, and scrapes them by their pod IPs
// (routed from this machine to the nodes).
type prometheus struct {
	url string
	cmd *exec.Cmd
}

// The chart's PodMonitor and ServiceMonitor, written as plain scrape configurations: the same
// selection (Adam's pods by their managed-by label, the operator by its component label), the
// same port name and the same relabelling.
const prometheusConfig = `global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
- job_name: adam-jobs
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: %[1]s
    selectors: [{role: pod, label: "app.kubernetes.io/managed-by=adam-operator"}]
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
  - {source_labels: [__meta_kubernetes_pod_label_adam_dev_job], target_label: adam_job}
  - {source_labels: [__meta_kubernetes_pod_label_adam_dev_role], target_label: role}
  - {source_labels: [__meta_kubernetes_pod_name], target_label: instance_name}
- job_name: adam-operator
  kubernetes_sd_configs:
  - role: pod
    kubeconfig_file: %[1]s
    namespaces: {names: [%[2]s]}
    selectors: [{role: pod, label: "app.kubernetes.io/component=operator"}]
  relabel_configs:
  - {source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics, action: keep}
`

func startPrometheus(t *testing.T) *prometheus {
	t.Helper()
	dir := filepath.Join(env.logs, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(prometheusConfig, env.kubeconfig, operatorNamespace)), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.bin, "prometheus"), "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("prometheus (tests/cluster/build.sh): %v", err)
	}
	p := &prometheus{url: "http://" + addr, cmd: cmd}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		log.Close()
	})
	eventually(t, 60*time.Second, "prometheus ready", func() bool {
		r, err := promClient.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == 200
	})
	return p
}

// promClient bounds every request to the server, so that a stalled one fails the test instead
// of hanging it.
var promClient = &http.Client{Timeout: 10 * time.Second}

// query evaluates a PromQL expression now; it returns how many series answered.
func (p *prometheus) query(expr string) (int, error) {
	r, err := promClient.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
		return 0, err
	}
	if out.Status != "success" {
		return 0, fmt.Errorf("%s", out.Error)
	}
	return len(out.Data.Result), nil
}

// dashboardQueries are the expressions of every panel of the chart's Grafana dashboard, with the
// dashboard's $job variable set to `job`.
func dashboardQueries(t *testing.T, job string) map[string]string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(env.root, "charts", "adam", "dashboards", "adam.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(text, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			if tg.Expr != "" {
				out[fmt.Sprintf("%s [%d]", p.Title, i)] = strings.ReplaceAll(tg.Expr, "$job", job)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no panel queries")
	}
	return out
}

// checkDashboard evaluates every panel's query while the job runs, until each has answered with
// data (a rate needs two samples in its window; a quantile needs its histogram observed).
func checkDashboard(t *testing.T, p *prometheus, job string, limit time.Duration) {
	t.Helper()
	queries := dashboardQueries(t, job)
	empty := map[string]string{}
	start := time.Now()
	for {
		empty = map[string]string{}
		for name, expr := range queries {
			n, err := p.query(expr)
			if err != nil {
				t.Errorf("panel %s: %q: %v", name, expr, err)
				return
			}
			if n == 0 {
				empty[name] = expr
			}
		}
		if len(empty) == 0 || time.Since(start) > limit {
			break
		}
		time.Sleep(2 * time.Second)
	}
	for name, expr := range empty {
		t.Errorf("panel %s: no data within %v: %s", name, limit, expr)
	}
	t.Logf("all %d panel queries of the dashboard returned data after %v", len(queries), time.Since(start).Round(time.Second))
}
