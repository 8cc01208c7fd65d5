package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deletingJobs names the AdamJobs, in every namespace, that are being deleted.
func deletingJobs(t *testing.T) []string {
	t.Helper()
	list, err := env.dyn.Resource(adamJobs).List(ctx(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range list.Items {
		if j.GetDeletionTimestamp() != nil {
			out = append(out, j.GetNamespace()+"/"+j.GetName())
		}
	}
	return out
}

// `helm uninstall` last: the CRD and the jobs stay (deleting the CRD would delete every job and
// its pods), nothing is left stuck in deletion, and installing again finds them.
func TestHelmUninstallLeavesNoJobStuckInDeletion(t *testing.T) {
	o := sharedOperator(t)
	// Jobs the earlier tests deleted while no operator ran are finished first.
	eventually(t, 120*time.Second, "earlier deletions finished", func() (bool, string) {
		d := deletingJobs(t)
		return len(d) == 0, strings.Join(d, ", ")
	})
	ns := namespace(t, "e2e-uninstall")
	runJob(t, ns, "stays")
	o.noForbidden(t)
	stopShared(t)
	helm(t, "uninstall", release, "-n", operatorNamespace, "--wait", "--timeout", "60s")
	if _, err := env.dyn.Resource(crds).Get(ctx(), "adamjobs.adam.dev", metav1.GetOptions{}); err != nil {
		t.Fatalf("helm uninstall removed the CRD (and with it every job): %v", err)
	}
	time.Sleep(2 * time.Second)
	if d := deletingJobs(t); len(d) > 0 {
		t.Errorf("jobs stuck in deletion after helm uninstall: %v", d)
	}
	if _, err := env.dyn.Resource(adamJobs).Namespace(ns).Get(ctx(), "stays", metav1.GetOptions{}); err != nil {
		t.Errorf("the job went with the release: %v", err)
	}
	// Installing again adopts the kept CRD, and a new operator looks after the old job.
	helm(t, "install", release, "charts/adam", "-n", operatorNamespace, "--wait", "--timeout", "120s")
	// The release's ServiceAccount is a new object now: the old one's tokens are refused (401),
	// as a pod of the new release would get a token of the new one.
	kubeconfig, err := serviceAccountKubeconfig("reinstalled", "")
	if err != nil {
		t.Fatal(err)
	}
	saKubeconfig = kubeconfig // for the tests after this one
	again := startOperatorWith(t, "reinstalled", []string{"--kubeconfig", kubeconfig}, nil,
		"--leader-elect=false", "--namespace", ns)
	defer again.stop()
	kubectl(t, "delete", "pod", "stays-trainer-1", "-n", ns, "--wait=false")
	eventually(t, 60*time.Second, "the job looked after again", func() (bool, string) {
		return len(jobPods(t, ns, "stays", "trainer")) == 2, fmt.Sprint(len(jobPods(t, ns, "stays", "trainer")))
	})
	kubectl(t, "delete", "adamjob", "stays", "-n", ns, "--timeout=60s")
	again.noForbidden(t)
}
