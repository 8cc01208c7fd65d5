package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// saKubeconfig authenticates as the chart's ServiceAccount, with a token file the tests may
// rotate: the operator gets exactly the permissions the chart grants.
var saKubeconfig string

// shared is the operator most tests use; tests that stop it start it again.
var (
	shared   *operator
	sharedMu sync.Mutex
)

func TestMain(m *testing.M) {
	if err := loadEnvironment(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	start := time.Now()
	if out, errs, err := run("", "helm", "install", release, "charts/adam", "-n", operatorNamespace,
		"--create-namespace", "--wait", "--timeout", "120s"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: helm install: %v\n%s%s", err, out, errs)
		os.Exit(1)
	}
	var err error
	if saKubeconfig, err = serviceAccountKubeconfig("operator", ""); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	fmt.Printf("e2e: chart installed and the ServiceAccount's kubeconfig written in %v\n", time.Since(start).Round(time.Millisecond))
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

// serviceAccountKubeconfig writes DIR/NAME.kubeconfig for the chart's ServiceAccount, its token
// in NAME.token (a bound token from the TokenRequest API, bound to the Secret `boundTo` when
// given, so that deleting the Secret revokes it).
func serviceAccountKubeconfig(name, boundTo string) (string, error) {
	token, err := serviceAccountToken(boundTo)
	if err != nil {
		return "", err
	}
	tokenFile := filepath.Join(env.logs, name+".token")
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(env.logs, name+".kubeconfig")
	text := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, certificate-authority: %q}
users:
- name: adam
  user: {tokenFile: %q}
contexts:
- name: local
  context: {cluster: local, user: adam, namespace: %s}
current-context: local
`, env.vars["ADAM_CLUSTER_SERVER"], filepath.Join(env.clusterDir, "pki", "ca.crt"), tokenFile, operatorNamespace)
	return path, os.WriteFile(path, []byte(text), 0o600)
}

func serviceAccountToken(boundTo string) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}
	if boundTo != "" {
		sec, err := env.cs.CoreV1().Secrets(operatorNamespace).Get(ctx(), boundTo, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Secret", APIVersion: "v1", Name: boundTo, UID: sec.UID}
	}
	tr, err := env.cs.CoreV1().ServiceAccounts(operatorNamespace).CreateToken(ctx(), release, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", operatorNamespace, release, err)
	}
	return strings.TrimSpace(tr.Status.Token), nil
}

func ptr[T any](v T) *T { return &v }

// sharedOperator returns the operator most tests share, started on first use: two workers,
// leader election with the chart's Lease, default timings.
func sharedOperator(t testing.TB) *operator {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil || shared.exited() {
		shared = startOperator(t, "shared")
		shared.logLine(t, "now leads", 30*time.Second)
	}
	return shared
}

// stopShared stops the shared operator (a test that needs the cluster to itself).
func stopShared(t testing.TB) {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.noForbidden(t)
		shared.stop()
		shared = nil
	}
}
