package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type badManifest struct {
	Name     string `json:"name"`
	Pointer  string `json:"pointer"`
	Value    any    `json:"value"`
	Remove   bool   `json:"remove"`
	Validate string `json:"validate"`
	Crd      string `json:"crd"`
}

// applyPointer sets (or removes) the value at a JSON pointer, as the C++ catalogue test does.
func applyPointer(t *testing.T, doc map[string]any, pointer string, value any, remove bool) {
	t.Helper()
	parts := strings.Split(strings.TrimPrefix(pointer, "/"), "/")
	var cur any = doc
	for _, p := range parts[:len(parts)-1] {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[p]
			if !ok {
				next = map[string]any{}
				c[p] = next
			}
			cur = next
		case []any:
			i, _ := strconv.Atoi(p)
			cur = c[i]
		}
	}
	last := parts[len(parts)-1]
	switch c := cur.(type) {
	case map[string]any:
		if remove {
			delete(c, last)
		} else {
			c[last] = value
		}
	case []any:
		i, _ := strconv.Atoi(last)
		c[i] = value
	}
}

// Every documented bad manifest (tests/operator/bad-manifests.yaml, the catalogue `adam
// validate` is tested against too) is refused by the real API server through `kubectl apply`,
// naming the field.
func testTheApiServerRefusesEveryDocumentedBadManifest(t *testing.T) {
	ns := namespace(t, "e2e-validation")
	text, err := os.ReadFile(filepath.Join(env.root, "tests", "operator", "bad-manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var catalogue []badManifest
	if err := yaml.Unmarshal(text, &catalogue); err != nil {
		t.Fatal(err)
	}
	if len(catalogue) < 15 {
		t.Fatalf("%d bad manifests in the catalogue", len(catalogue))
	}
	for _, bad := range catalogue {
		t.Run(bad.Name, func(t *testing.T) {
			job := example(t, "fashion-mnist-ha")
			applyPointer(t, job, bad.Pointer, bad.Value, bad.Remove)
			manifest, _ := json.Marshal(job)
			out, errs, err := run(string(manifest), "kubectl", "apply", "-n", ns, "--dry-run=server", "-f", "-")
			if err == nil {
				t.Fatalf("accepted: %s", out)
			}
			if !strings.Contains(errs, bad.Crd) {
				t.Errorf("refused without naming the field (want %q):\n%s", bad.Crd, errs)
			}
		})
	}
	// The examples themselves are accepted.
	for _, name := range []string{"fashion-mnist", "fashion-mnist-ha", "fashion-mnist-best"} {
		kubectl(t, "apply", "-n", ns, "--dry-run=server", "-f", "examples/"+name+".yaml")
	}
}

// Every object `adam render` makes for the examples passes the API server's strict validation
// (unknown or duplicate fields refused).
func testRenderedObjectsPassStrictServerValidation(t *testing.T) {
	ns := namespace(t, "e2e-render")
	for _, name := range []string{"fashion-mnist", "fashion-mnist-ha"} {
		out, err := exec.Command(env.adam, "render", filepath.Join(env.root, "examples", name+".yaml"), "-n", ns).Output()
		if err != nil {
			t.Fatalf("adam render %s: %v", name, err)
		}
		if o, errs, err := run(string(out), "kubectl", "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
			t.Errorf("%s: the API server refuses what adam render makes: %v\n%s%s", name, err, o, errs)
		}
	}
}

// What shapes the model layout and the shard map cannot change while a job exists, and neither
// can whether it is set; what does not (trainers, and with copies the server count) can.
func testShardLayoutFieldsAreImmutableTheirPresenceIncluded(t *testing.T) {
	ns := namespace(t, "e2e-immutable")
	base := example(t, "fashion-mnist-ha")
	set(base, "metadata/name", "immutable")
	set(base, "spec/runPolicy", map[string]any{"suspend": true}) // no pods: the spec alone is tested
	set(base, "spec/training/denseUpdates", "weights")
	applyJSON := func(job map[string]any, dryRun bool) (string, error) {
		manifest, _ := json.Marshal(job)
		args := []string{"apply", "-n", ns, "-f", "-"}
		if dryRun {
			args = append(args, "--dry-run=server")
		}
		out, errs, err := run(string(manifest), "kubectl", args...)
		return out + errs, err
	}
	if out, err := applyJSON(base, false); err != nil {
		t.Fatalf("create: %v %s", err, out)
	}
	for _, c := range []struct {
		path  string
		value any
		want  string
	}{
		{"spec/roles/parameterServer/replicas", nil, "spec.roles.parameterServer.replicas: changes only with"},
		{"spec/roles/parameterServer/shardBytes", nil, "spec.roles.parameterServer.shardBytes: is immutable"},
		{"spec/roles/parameterServer/copies", nil, "spec.roles.parameterServer.copies: is immutable"},
		{"spec/roles/controller/replicas", int64(5), "spec.roles.controller.replicas: is immutable"},
		{"spec/roles/controller", nil, "spec.roles.controller.replicas: is immutable"},
		{"spec/training/seed", nil, "spec.training.seed: is immutable"},
		{"spec/training/pushEvery", int64(50), "spec.training.pushEvery: is immutable"},
		{"spec/training/denseUpdates", nil, "spec.training.denseUpdates: is immutable"},
		{"spec/model/layers/4/units", int64(300), "spec.model: is immutable"},
	} {
		job := example(t, "fashion-mnist-ha")
		set(job, "metadata/name", "immutable")
		set(job, "spec/runPolicy", map[string]any{"suspend": true})
		set(job, "spec/training/denseUpdates", "weights")
		if strings.Contains(c.path, "layers") {
			layers := job["spec"].(map[string]any)["model"].(map[string]any)["layers"].([]any)
			layers[4].(map[string]any)["units"] = c.value
		} else {
			set(job, c.path, c.value)
		}
		out, err := applyJSON(job, true)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("%s -> %v: want a refusal %q, got err=%v: %s", c.path, c.value, c.want, err, out)
		}
	}
	scaled := example(t, "fashion-mnist-ha")
	set(scaled, "metadata/name", "immutable")
	set(scaled, "spec/runPolicy", map[string]any{"suspend": true})
	set(scaled, "spec/training/denseUpdates", "weights")
	set(scaled, "spec/roles/trainer/replicas", int64(4))
	set(scaled, "spec/roles/parameterServer/replicas", int64(5)) // with copies: elastic servers
	if out, err := applyJSON(scaled, true); err != nil {
		t.Errorf("scaling trainers and servers refused: %v %s", err, out)
	}
	kubectl(t, "delete", "adamjob", "immutable", "-n", ns, "--wait=false")
}
