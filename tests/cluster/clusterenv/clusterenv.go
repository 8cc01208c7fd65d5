// Package clusterenv reads a cluster that tests/cluster/cluster.sh started, for the Go tests that
// run against it (e2e/ on kwok's nodes, nodes/ on real ones): the variables of its env file and
// clients of its API server with the admin's kubeconfig.
package clusterenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// AdamJobs is the CRD's resource.
var AdamJobs = schema.GroupVersionResource{Group: "adam.dev", Version: "v1alpha1", Resource: "adamjobs"}

// Where the tests install the chart.
const (
	OperatorNamespace = "adam-system"
	Release           = "adam"
)

// Cluster is one started cluster.
type Cluster struct {
	Dir        string            // cluster.sh's folder
	Vars       map[string]string // its env file: KUBECONFIG, ADAM_CLUSTER_BIN, ADAM_CLUSTER_SERVER, ...
	Kubeconfig string            // the admin's
	Bin        string            // kubectl, helm, ... of the pinned releases
	Config     *rest.Config
	Clientset  *kubernetes.Clientset
	Dynamic    dynamic.Interface
}

// Load reads the cluster in dir; its clients allow 200 requests/s (burst 400), as tests that
// create many objects at once need.
func Load(dir string) (*Cluster, error) {
	text, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s: %w", dir, err)
	}
	c := &Cluster{Dir: dir, Vars: map[string]string{}}
	for _, line := range strings.Split(string(text), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			c.Vars[k] = v
		}
	}
	c.Kubeconfig, c.Bin = c.Vars["KUBECONFIG"], c.Vars["ADAM_CLUSTER_BIN"]
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	c.Config.QPS, c.Config.Burst = 200, 400
	if c.Clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}
