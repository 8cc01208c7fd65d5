package nodes

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Pods that cannot start say so on their AdamJob within 30 s, in the words of whoever refused
// them, as a StartFailure condition and a Warning event: an image no node has and none can pull
// (the kubelet's ErrImagePull), a volume that does not mount (the kubelet's FailedMount event), a
// variable from a Secret that does not exist (the kubelet's CreateContainerConfigError), a pod
// that Pod Security admission refuses (the API server's 403), pods beyond the namespace's
// ResourceQuota (403 too) and a pod whose template the API server finds invalid (its 422). The
// six at once.
func TestStartFailuresShowOnTheJobWithin30Seconds(t *testing.T) {
	kubectl(t, `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "restricted",
  "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}`, "apply", "-f", "-")
	kubectl(t, `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "quota"}},
  {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "two-pods", "namespace": "quota"},
   "spec": {"hard": {"pods": "2"}}}]}`, "apply", "-f", "-")
	cases := []struct {
		name, ns, reason, says string
		edit                   func(j map[string]any)
	}{
		// A registry on the node's own loopback where nothing listens: the pull fails at once,
		// with no name to resolve and no packet leaving the node.
		{"no-image", "default", "ErrImagePull", "127.0.0.1:1/adam:no-such-tag", func(j map[string]any) {
			set(j, "127.0.0.1:1/adam:no-such-tag", "spec", "image")
		}},
		{"no-volume", "default", "FailedMount", "/no/such/folder", func(j map[string]any) {
			dataOn(j, hostPath("/no/such/folder"))
		}},
		{"no-secret", "default", "CreateContainerConfigError", `secret "adam-no-such-secret" not found`, func(j map[string]any) {
			set(j, []any{map[string]any{"name": "TOKEN", "valueFrom": map[string]any{
				"secretKeyRef": map[string]any{"name": "adam-no-such-secret", "key": "token"}}}},
				"spec", "podTemplate", "env")
		}},
		{"refused", "restricted", "FailedCreate", "violates PodSecurity", func(j map[string]any) {
			dataOn(j, hostPath("/var/adam-data"))
		}},
		{"over-quota", "quota", "FailedCreate", "exceeded quota: two-pods", func(j map[string]any) {}},
		{"invalid", "default", "FailedCreate", `Unsupported value: "Sometimes"`, func(j map[string]any) {
			set(j, []any{map[string]any{"key": "adam.dev/any", "operator": "Sometimes"}},
				"spec", "podTemplate", "tolerations")
		}},
	}
	for _, c := range cases {
		j := example(t, "fashion-mnist", c.name, c.ns)
		set(j, 1, "spec", "training", "epochs")
		size(j, "100m", "512Mi")
		c.edit(j)
		apply(t, j)
	}
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(c.name, func(t *testing.T) {
				var got string
				took := eventually(t, 30*time.Second, c.name+": StartFailure "+c.reason, func() bool {
					got = condition(t, c.ns, c.name, "StartFailure")
					return strings.HasPrefix(got, "True "+c.reason+":") && strings.Contains(got, c.says)
				})
				t.Logf("%s after %v: %s", c.name, took.Round(100*time.Millisecond), got)
				if ev := jobEvents(t, c.ns, c.name, c.reason); len(ev) == 0 {
					t.Errorf("%s: no %s event on the job", c.name, c.reason)
				}
				if phase := job(t, c.ns, c.name).Object["status"].(map[string]any)["phase"]; phase != "Pending" {
					t.Errorf("%s: phase %v, want Pending", c.name, phase)
				}
			})
		}()
	}
	wg.Wait()
	for _, c := range cases {
		kubectl(t, "", "delete", "aj", c.name, "-n", c.ns, "--wait=false")
	}
}
