package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

var crds = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// helm lint --strict, with the default values and with every optional object on.
func TestChartLintsStrictly(t *testing.T) {
	helm(t, "lint", "--strict", "charts/adam")
	helm(t, "lint", "--strict", "charts/adam", "--set", "watchNamespace=ml,metrics.serviceMonitor.enabled=true,replicaCount=1")
}

// values.schema.json: a value of the wrong type or a misspelt key is refused, naming it.
func TestChartRefusesBadValuesNamingThem(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"replicaCount=two", "/replicaCount"},
		{"workerz=3", "'workerz' not allowed"},
		{"kubeApi.qps=-1", "/kubeApi/qps"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"restartBackoff.initial=soon", "/restartBackoff/initial"},
		{"imagePullSecrets[0].nam=x", "'nam' not allowed"},
	} {
		_, errs, err := run("", "helm", "template", "adam", "charts/adam", "--set", c.set)
		if err == nil || !strings.Contains(errs, c.want) {
			t.Errorf("helm template --set %s: want a refusal naming %s, got err=%v: %s", c.set, c.want, err, errs)
		}
	}
}

// renderChart is `helm template` of the chart, as objects.
func renderChart(t *testing.T, set ...string) []map[string]any {
	t.Helper()
	args := []string{"template", release, "charts/adam", "-n", operatorNamespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out []map[string]any
	for _, doc := range strings.Split(helm(t, args...), "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("helm template output: %v", err)
		}
		if o != nil {
			out = append(out, o)
		}
	}
	return out
}

// The RBAC grants exactly what the operator calls: every call is covered (a missing one fails
// the operator's calls with 403, which every test that runs an operator checks), and nothing
// wider: no wildcard and no verb the operator never uses.
func TestChartRbacIsNoWiderThanTheOperatorsCalls(t *testing.T) {
	needed := map[string]bool{}
	for _, n := range []string{
		"adam.dev/adamjobs/get", "adam.dev/adamjobs/list", "adam.dev/adamjobs/watch", "adam.dev/adamjobs/update",
		"adam.dev/adamjobs/delete", "adam.dev/adamjobs/status/get", "adam.dev/adamjobs/status/update",
		"adam.dev/adamjobs/finalizers/update",
		"/pods/get", "/pods/list", "/pods/watch", "/pods/create", "/pods/patch", "/pods/delete", "/nodes/get",
		"/configmaps/get", "/configmaps/list", "/configmaps/watch", "/configmaps/create", "/configmaps/patch", "/configmaps/update",
		"/services/get", "/services/list", "/services/watch", "/services/create", "/services/patch", "/services/update",
		"/persistentvolumeclaims/get", "/persistentvolumeclaims/list", "/persistentvolumeclaims/watch",
		"/persistentvolumeclaims/create", "/persistentvolumeclaims/patch",
		"apps/statefulsets/get", "apps/statefulsets/list", "apps/statefulsets/watch", "apps/statefulsets/create",
		"apps/statefulsets/patch", "apps/statefulsets/update", "apps/statefulsets/delete",
		"/secrets/get", "/secrets/create", "/secrets/update",
		"networking.k8s.io/networkpolicies/get", "networking.k8s.io/networkpolicies/list",
		"networking.k8s.io/networkpolicies/watch", "networking.k8s.io/networkpolicies/create",
		"networking.k8s.io/networkpolicies/patch", "networking.k8s.io/networkpolicies/update",
		"/events/list", "events.k8s.io/events/create", "events.k8s.io/events/update",
		"scheduling.x-k8s.io/podgroups/create",
		"scheduling.x-k8s.io/podgroups/get", "scheduling.x-k8s.io/podgroups/patch",
		"scheduling.k8s.io/podgroups/get", "scheduling.k8s.io/podgroups/create",
		"policy/poddisruptionbudgets/get", "policy/poddisruptionbudgets/list",
		"policy/poddisruptionbudgets/watch", "policy/poddisruptionbudgets/create",
		"policy/poddisruptionbudgets/patch", "policy/poddisruptionbudgets/update",
		"coordination.k8s.io/leases/get", "coordination.k8s.io/leases/create", "coordination.k8s.io/leases/update",
	} {
		needed[n] = true
	}
	var wider []string
	for _, o := range renderChart(t) {
		if o["kind"] != "ClusterRole" && o["kind"] != "Role" {
			continue
		}
		rules, _, _ := unstructured.NestedSlice(o, "rules")
		for _, r := range rules {
			rule := r.(map[string]any)
			for _, g := range rule["apiGroups"].([]any) {
				for _, res := range rule["resources"].([]any) {
					for _, v := range rule["verbs"].([]any) {
						grant := g.(string) + "/" + res.(string) + "/" + v.(string)
						if strings.Contains(grant, "*") || !needed[grant] {
							wider = append(wider, grant)
						}
					}
				}
			}
		}
	}
	sort.Strings(wider)
	if len(wider) > 0 {
		t.Errorf("the chart grants more than the operator calls: %v", wider)
	}
}

// What `helm install` (TestMain) left: the CRD established, and every object with Helm's and
// Kubernetes' recommended labels.
func TestChartInstallsTheCrdAndLabelsEverything(t *testing.T) {
	crd, err := env.dyn.Resource(crds).Get(ctx(), "adamjobs.adam.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the chart installed no CRD: %v", err)
	}
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	for _, c := range conds {
		m := c.(map[string]any)
		established = established || (m["type"] == "Established" && m["status"] == "True")
	}
	if !established {
		t.Errorf("CRD not Established: %v", conds)
	}
	if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the CRD is not kept on uninstall: %v", crd.GetAnnotations())
	}
	for _, o := range renderChart(t) {
		u := unstructured.Unstructured{Object: o}
		l := u.GetLabels()
		for _, key := range []string{"helm.sh/chart", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"} {
			if l[key] == "" {
				t.Errorf("%s %s lacks the label %s", u.GetKind(), u.GetName(), key)
			}
		}
	}
	// The dashboard ConfigMap carries the dashboard file as it is, for Grafana's sidecar.
	dash, err := env.cs.CoreV1().ConfigMaps(operatorNamespace).Get(ctx(), release+"-dashboard", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	file, _ := os.ReadFile(filepath.Join(env.root, "charts", "adam", "dashboards", "adam.json"))
	if dash.Labels["grafana_dashboard"] != "1" || strings.TrimSpace(dash.Data["adam.json"]) != strings.TrimSpace(string(file)) {
		t.Errorf("the dashboard ConfigMap does not carry dashboards/adam.json under the sidecar's label: %v", dash.Labels)
	}
	dep, err := env.cs.AppsV1().Deployments(operatorNamespace).Get(ctx(), release+"-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas > 1 {
		if _, err := env.cs.PolicyV1().PodDisruptionBudgets(operatorNamespace).Get(ctx(), release+"-operator", metav1.GetOptions{}); err != nil {
			t.Errorf("%d operator replicas and no PodDisruptionBudget: %v", *dep.Spec.Replicas, err)
		}
	}
}

// ServiceMonitor and PodMonitor only where the Prometheus Operator's API is served: asking for
// them on a cluster without it installs nothing and fails nothing; once the API is there, they
// come.
func TestChartMonitorsOnlyWhereThePrometheusOperatorIs(t *testing.T) {
	helm(t, "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values", "--set", "metrics.serviceMonitor.enabled=true")
	monitors := func(kind string) bool {
		out, _, _ := run("", "kubectl", "get", kind, "-n", operatorNamespace, "-o", "name")
		return strings.TrimSpace(out) != ""
	}
	if monitors("servicemonitors.monitoring.coreos.com") {
		t.Fatal("a ServiceMonitor where no Prometheus Operator runs")
	}
	// The Prometheus Operator's API: its two kinds, registered as it registers them.
	api := ""
	for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
		plural := strings.ToLower(kind) + "s"
		api += `---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ` + plural + `.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ` + kind + `, plural: ` + plural + `}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`
	}
	if out, errs, err := run(api, "kubectl", "apply", "-f", "-"); err != nil {
		t.Fatalf("monitoring API: %v %s%s", err, out, errs)
	}
	defer run(api, "kubectl", "delete", "-f", "-")
	kubectl(t, "wait", "--for=condition=Established", "crd/servicemonitors.monitoring.coreos.com", "crd/podmonitors.monitoring.coreos.com")
	eventually(t, 30*time.Second, "helm seeing the monitoring API", func() (bool, string) {
		out, errs, err := run("", "helm", "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values")
		return err == nil && monitors("servicemonitors.monitoring.coreos.com") && monitors("podmonitors.monitoring.coreos.com"), out + errs
	})
	helm(t, "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values", "--set", "metrics.serviceMonitor.enabled=false")
	if monitors("servicemonitors.monitoring.coreos.com") {
		t.Error("the ServiceMonitor outlived metrics.serviceMonitor.enabled=false")
	}
}

// `helm upgrade` upgrades the CRD (Helm leaves files under crds/ alone after the first install;
// the chart's CRD is a template): a new printer column appears, and goes again with the old chart.
func TestHelmUpgradeUpgradesTheCrd(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, filepath.Join(env.root, "charts", "adam"), filepath.Join(dir, "adam"))
	crdFile := filepath.Join(dir, "adam", "files", "adam.dev_adamjobs.yaml")
	text, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	const column = "{name: Restarts, type: integer, jsonPath: .status.restarts}"
	changed := strings.Replace(string(text), "        - {name: Age, type: date", "        - "+column+"\n        - {name: Age, type: date", 1)
	if changed == string(text) {
		t.Fatal("no Age column to put the new one before")
	}
	if err := os.WriteFile(crdFile, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	columns := func() string {
		crd, err := env.dyn.Resource(crds).Get(ctx(), "adamjobs.adam.dev", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cols, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
		var names []string
		for _, c := range cols[0].(map[string]any)["additionalPrinterColumns"].([]any) {
			names = append(names, c.(map[string]any)["name"].(string))
		}
		return strings.Join(names, ",")
	}
	helm(t, "upgrade", release, filepath.Join(dir, "adam"), "-n", operatorNamespace, "--reuse-values")
	if got := columns(); !strings.Contains(got, "Restarts") {
		t.Errorf("helm upgrade left the CRD as it was: columns %s", got)
	}
	helm(t, "upgrade", release, "charts/adam", "-n", operatorNamespace, "--reuse-values")
	if got := columns(); strings.Contains(got, "Restarts") {
		t.Errorf("the CRD kept the column the chart no longer has: %s", got)
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// crds/ holds the CRD itself (a link to the chart's file, one source): `kubectl apply -f crds/`
// takes it, as GitOps tools that apply that folder do. A job that leaves fields out is stored
// with the schema's defaults and the chart's image, where `kubectl get -o yaml` shows them.
func TestTheCrdsFolderAppliesAndAJobShowsItsDefaults(t *testing.T) {
	out := kubectl(t, "apply", "--dry-run=server", "-f", filepath.Join(env.root, "crds"))
	if !strings.Contains(out, "customresourcedefinition.apiextensions.k8s.io/adamjobs.adam.dev") {
		t.Errorf("kubectl apply -f crds/: %s", out)
	}
	values, err := os.ReadFile(filepath.Join(env.root, "charts", "adam", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t, "e2e-defaults")
	job := example(t, "fashion-mnist")
	set(job, "metadata/name", "defaults")
	spec := job["spec"].(map[string]any)
	delete(spec, "image")
	delete(spec, "training")
	spec["runPolicy"] = map[string]any{"suspend": true} // stored, not run
	createJob(t, ns, job)
	stored := getJob(t, ns, "defaults").Object
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{"spec", "image"}, v.Image.Repository + ":" + v.Image.Tag},
		{[]string{"spec", "training", "epochs"}, int64(10)},
		{[]string{"spec", "training", "learningRate"}, 0.02},
		{[]string{"spec", "runPolicy", "backoffLimit"}, int64(3)},
		{[]string{"spec", "runPolicy", "cleanPodPolicy"}, "Running"},
		{[]string{"spec", "runPolicy", "suspend"}, true},
	} {
		got, found, _ := unstructured.NestedFieldNoCopy(stored, c.path...)
		if !found || got != c.want {
			t.Errorf("stored %s = %v (found %v), want %v", strings.Join(c.path, "."), got, found, c.want)
		}
	}
	kubectl(t, "delete", "adamjob", "defaults", "-n", ns, "--wait=false")
}

// The operator's pods as values set them: pull secrets, annotations, a priority class, and the
// chart's image passed on as the jobs' default; the replicas prefer different nodes unless
// `affinity` says otherwise.
func TestChartPodSettingsFromValues(t *testing.T) {
	deployment := func(set ...string) map[string]any {
		for _, o := range renderChart(t, set...) {
			if o["kind"] == "Deployment" {
				return o
			}
		}
		t.Fatal("no Deployment rendered")
		return nil
	}
	pod := func(d map[string]any, path ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(d, append([]string{"spec", "template"}, path...)...)
		return v
	}
	d := deployment("imagePullSecrets[0].name=regcred", "podAnnotations.team=ml", "priorityClassName=adam-high",
		"image.repository=registry.example/adam", "image.tag=v9")
	if s := fmt.Sprint(pod(d, "spec", "imagePullSecrets")); s != "[map[name:regcred]]" {
		t.Errorf("imagePullSecrets %s", s)
	}
	if s := fmt.Sprint(pod(d, "metadata", "annotations")); s != "map[team:ml]" {
		t.Errorf("annotations %s", s)
	}
	if s := fmt.Sprint(pod(d, "spec", "priorityClassName")); s != "adam-high" {
		t.Errorf("priorityClassName %s", s)
	}
	containers := pod(d, "spec", "containers").([]any)
	c := containers[0].(map[string]any)
	if c["image"] != "registry.example/adam:v9" || !strings.Contains(fmt.Sprint(c["args"]), "--default-image=registry.example/adam:v9") {
		t.Errorf("image %v, args %v: want registry.example/adam:v9 and it as --default-image", c["image"], c["args"])
	}
	anti, _, _ := unstructured.NestedSlice(pod(deployment(), "spec").(map[string]any), "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	if len(anti) != 1 || !strings.Contains(fmt.Sprint(anti), "topologyKey:kubernetes.io/hostname") {
		t.Errorf("default affinity: %v, want a preferred anti-affinity on the hostname", anti)
	}
	own := pod(deployment("affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists"), "spec", "affinity")
	if s := fmt.Sprint(own); strings.Contains(s, "podAntiAffinity") || !strings.Contains(s, "nodeAffinity") {
		t.Errorf("affinity from values: %s", s)
	}
	// The operator's /metrics (no authentication) is open to any pod unless metricsFrom narrows it.
	from := func(set ...string) string {
		for _, o := range renderChart(t, set...) {
			if o["kind"] == "NetworkPolicy" {
				ingress, _, _ := unstructured.NestedSlice(o, "spec", "ingress")
				return fmt.Sprint(ingress[0].(map[string]any)["from"])
			}
		}
		t.Fatal("no NetworkPolicy rendered")
		return ""
	}
	if f := from(); f != "<nil>" {
		t.Errorf("default metrics ingress from %s, want any", f)
	}
	if f := from("networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring"); f != "[map[namespaceSelector:map[matchLabels:map[team:monitoring]]]]" {
		t.Errorf("metrics ingress from %s, want the monitoring namespace only", f)
	}
}
