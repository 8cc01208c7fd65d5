package e2e

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appliedBy says whether `fields` (an object's managedFields) has an Apply entry of `manager`.
func appliedBy(fields []metav1.ManagedFieldsEntry, manager string) bool {
	for _, f := range fields {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationApply {
			return true
		}
	}
	return false
}

// What the operator owns, changed by another client (kubectl, as its own field manager), is put
// back within seconds, by server-side apply as field manager adam-operator (or written whole where
// the API server refuses that apply), each object with a Repaired event naming the field; left
// alone, the objects as the real API server returns them (its defaults filled in) are never taken
// for changed: nothing is applied before the edits, and nothing again after the repair.
func testAnotherClientsChangeIsPutBack(t *testing.T) {
	op := sharedOperator(t)
	const name = "fashion-mnist-ha"
	ns := namespace(t, "e2e-drift")
	kubectl(t, "apply", "-n", ns, "-f", "examples/"+name+".yaml")
	kubectl(t, "wait", "-n", ns, "--for=condition=Running", "adamjob/"+name, "--timeout=120s")
	// More than one status period (10 s): the operator compared every object at least once.
	time.Sleep(12 * time.Second)
	cs := env.cs
	svc, err := cs.CoreV1().Services(ns).Get(ctx(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set, err := cs.AppsV1().StatefulSets(ns).Get(ctx(), name+"-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if appliedBy(svc.ManagedFields, "adam-operator") || appliedBy(set.ManagedFields, "adam-operator") {
		t.Errorf("objects nobody changed were applied to (a default of the API server taken for drift): %v %v", svc.ManagedFields, set.ManagedFields)
	}
	if ok, _ := hasEvent(t, ns, name, "Repaired", ""); ok {
		t.Errorf("a Repaired event before any change: %v", jobEvents(t, ns, name))
	}
	before := op.metric(t, "adam_operator_repairs_total", `kind="Service"`)
	image := set.Spec.Template.Spec.Containers[0].Image

	trainer := name + "-trainer-0"
	kubectl(t, "patch", "service", name, "-n", ns, "--type=json", "-p", `[{"op":"replace","path":"/spec/ports/0/port","value":1}]`)
	kubectl(t, "patch", "configmap", name+"-job", "-n", ns, "--type=merge", "-p", `{"data":{"job.yaml":"kind: Nonsense"}}`)
	kubectl(t, "patch", "statefulset", name+"-controller", "-n", ns, "--type=json", "-p",
		`[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"someone-elses:1"}]`)
	kubectl(t, "patch", "networkpolicy", name, "-n", ns, "--type=merge", "-p", `{"spec":{"ingress":[]}}`)
	kubectl(t, "label", "pod", trainer, "-n", ns, "app.kubernetes.io/component-", "added-by-someone=kept")

	took := eventually(t, 30*time.Second, "every change put back", func() (bool, string) {
		s, err1 := cs.CoreV1().Services(ns).Get(ctx(), name, metav1.GetOptions{})
		cm, err2 := cs.CoreV1().ConfigMaps(ns).Get(ctx(), name+"-job", metav1.GetOptions{})
		ss, err3 := cs.AppsV1().StatefulSets(ns).Get(ctx(), name+"-controller", metav1.GetOptions{})
		np, err4 := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx(), name, metav1.GetOptions{})
		p, err5 := cs.CoreV1().Pods(ns).Get(ctx(), trainer, metav1.GetOptions{})
		for _, err := range []error{err1, err2, err3, err4, err5} {
			if err != nil {
				return false, err.Error()
			}
		}
		if len(s.Spec.Ports) == 0 || len(ss.Spec.Template.Spec.Containers) == 0 {
			return false, "a Service without ports or a StatefulSet without containers"
		}
		state := fmt.Sprintf("port %d, job.yaml %d bytes, image %s, %d ingress rules, component %q",
			s.Spec.Ports[0].Port, len(cm.Data["job.yaml"]), ss.Spec.Template.Spec.Containers[0].Image,
			len(np.Spec.Ingress), p.Labels["app.kubernetes.io/component"])
		return s.Spec.Ports[0].Port == svc.Spec.Ports[0].Port && cm.Data["job.yaml"] != "kind: Nonsense" &&
			ss.Spec.Template.Spec.Containers[0].Image == image && len(np.Spec.Ingress) == 2 &&
			p.Labels["app.kubernetes.io/component"] == "trainer" && p.Labels["added-by-someone"] == "kept", state
	})
	t.Logf("every change put back %.1f s after the last edit", took.Seconds())
	for _, want := range []string{
		"Service " + name + ": spec.ports[name=grpc].port",
		"ConfigMap " + name + "-job: data.job.yaml",
		"StatefulSet " + name + "-controller: spec.template.spec.containers[name=controller].image",
		"NetworkPolicy " + name + ": spec.ingress",
		"Pod " + trainer + ": metadata.labels.app.kubernetes.io/component",
	} {
		if ok, why := hasEvent(t, ns, name, "Repaired", want+" was changed by another client"); !ok {
			t.Errorf("no Repaired event %q: %s", want, why)
		}
	}
	// The NetworkPolicy by server-side apply; the Service, whose apply the API server refuses (the
	// renumbered port keeps its name beside the operator's), written whole.
	np, _ := cs.NetworkingV1().NetworkPolicies(ns).Get(ctx(), name, metav1.GetOptions{})
	if !appliedBy(np.ManagedFields, "adam-operator") {
		t.Errorf("the NetworkPolicy was not put back by server-side apply as adam-operator: %+v", np.ManagedFields)
	}
	if svc, _ = cs.CoreV1().Services(ns).Get(ctx(), name, metav1.GetOptions{}); len(svc.Spec.Ports) != 3 {
		t.Errorf("the Service has ports %+v, want the job's three", svc.Spec.Ports)
	}
	if after := op.metric(t, "adam_operator_repairs_total", `kind="Service"`); after < before+1 {
		t.Errorf("adam_operator_repairs_total{kind=\"Service\"} went from %v to %v", before, after)
	}
	// Put back once: a status period later no Repaired event has repeated.
	time.Sleep(12 * time.Second)
	for _, e := range jobEvents(t, ns, name) {
		n := e.Count
		if e.Series != nil {
			n = max(n, e.Series.Count)
		}
		if e.Reason == "Repaired" && n > 1 {
			t.Errorf("repaired again and again: %s (%d times)", e.Message, n)
		}
	}
	kubectl(t, "delete", "adamjob", name, "-n", ns, "--wait=false")
}
