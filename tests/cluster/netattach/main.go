// netattach: the CNI meta plugin of tests/cluster's real nodes, in Multus's place (the Go module
// proxy refuses every version of github.com/k8snetworkplumbingwg/multus-cni). It does what a
// Multus "thin" plugin does for a pod, with the libraries Multus itself uses (the Network Plumbing
// Working Group's network-attachment-definition client for the annotation, the
// NetworkAttachmentDefinition and the network-status; CNI's libcni to run plugins):
//
//  1. ADD runs the cluster network (a conflist file, the pod's eth0) and keeps its result as the
//     pod's;
//  2. it reads the pod's k8s.v1.cni.cncf.io/networks annotation and, for each network named, the
//     NetworkAttachmentDefinition (NAMESPACE/NAME; the pod's namespace when none is given) and
//     runs its CNI configuration on interface net1, net2, ... (or the name after '@');
//  3. it writes every attachment, the cluster network's first, to the pod's
//     k8s.v1.cni.cncf.io/network-status annotation, as Multus does;
//  4. DEL undoes them in reverse order, from what ADD saved (the pod may be gone by then).
//
// An attachment that fails undoes what was done and fails the sandbox with a message naming the
// network, which the kubelet shows as the pod's FailedCreatePodSandBox event.
//
// Its configuration (a conflist of its own in the node's /etc/cni/net.d):
//
//	{"type": "netattach", "kubeconfig": FILE, "clusterNetwork": CONFLIST-FILE,
//	 "confDir": DIR (NetworkAttachmentDefinitions without spec.config name a file there),
//	 "stateDir": DIR (default /var/lib/netattach), "capabilities": {"portMappings": true}}
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	cniversion "github.com/containernetworking/cni/pkg/version"
	nadv1 "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	nadutils "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type netConf struct {
	types.NetConf
	Kubeconfig     string         `json:"kubeconfig"`
	ClusterNetwork string         `json:"clusterNetwork"`
	ConfDir        string         `json:"confDir"`
	StateDir       string         `json:"stateDir"`
	BinDir         string         `json:"binDir"`
	RuntimeConfig  map[string]any `json:"runtimeConfig,omitempty"`
}

// podArgs are the CNI_ARGS the kubelet's runtime passes for a pod.
type podArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI's names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

// attachment is one network ADD ran beyond the cluster network, as DEL needs it.
type attachment struct {
	Network string          `json:"network"` // NAMESPACE/NAME
	IfName  string          `json:"ifName"`
	Config  json.RawMessage `json:"config"` // the conflist it ran
}

type state struct {
	Attachments []attachment `json:"attachments"`
}

func load(args *skel.CmdArgs) (*netConf, *podArgs, error) {
	conf := &netConf{}
	if err := json.Unmarshal(args.StdinData, conf); err != nil {
		return nil, nil, fmt.Errorf("netattach: its configuration: %w", err)
	}
	if conf.ClusterNetwork == "" {
		return nil, nil, errors.New("netattach: its configuration names no clusterNetwork")
	}
	if conf.StateDir == "" {
		conf.StateDir = "/var/lib/netattach"
	}
	if conf.BinDir == "" {
		conf.BinDir = filepath.Dir(os.Args[0])
	}
	pa := &podArgs{}
	if err := types.LoadArgs(args.Args, pa); err != nil {
		return nil, nil, fmt.Errorf("netattach: CNI_ARGS: %w", err)
	}
	return conf, pa, nil
}

// call is what every command reads first: the configuration, the pod's arguments, the plugins
// and the cluster network's configuration list.
type call struct {
	conf    *netConf
	pod     *podArgs
	cni     *libcni.CNIConfig
	cluster *libcni.NetworkConfigList
}

func begin(args *skel.CmdArgs) (*call, error) {
	conf, pa, err := load(args)
	if err != nil {
		return nil, err
	}
	cluster, err := libcni.ConfListFromFile(conf.ClusterNetwork)
	if err != nil {
		return nil, fmt.Errorf("netattach: the cluster network %s: %w", conf.ClusterNetwork, err)
	}
	return &call{conf, pa, libcni.NewCNIConfig([]string{conf.BinDir}, nil), cluster}, nil
}

func (c *netConf) runtime(args *skel.CmdArgs, pa *podArgs, ifName string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: args.ContainerID, NetNS: args.Netns, IfName: ifName,
		Args: [][2]string{{"IgnoreUnknown", "true"}}, CapabilityArgs: c.RuntimeConfig}
	for _, kv := range [][2]string{{"K8S_POD_NAMESPACE", string(pa.K8S_POD_NAMESPACE)},
		{"K8S_POD_NAME", string(pa.K8S_POD_NAME)},
		{"K8S_POD_INFRA_CONTAINER_ID", string(pa.K8S_POD_INFRA_CONTAINER_ID)},
		{"K8S_POD_UID", string(pa.K8S_POD_UID)}} {
		if kv[1] != "" {
			rt.Args = append(rt.Args, kv)
		}
	}
	return rt
}

// confList reads a CNI configuration that is either a conflist or a single plugin's conf.
func confList(b []byte) (*libcni.NetworkConfigList, error) {
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	if _, ok := raw["plugins"]; ok {
		return libcni.ConfListFromBytes(b)
	}
	wrapped, err := json.Marshal(map[string]any{"cniVersion": raw["cniVersion"], "name": raw["name"],
		"plugins": []any{raw}})
	if err != nil {
		return nil, err
	}
	return libcni.ConfListFromBytes(wrapped)
}

func (c *netConf) statePath(containerID string) string {
	return filepath.Join(c.StateDir, containerID+".json")
}

func client(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

func networkAttachment(ctx context.Context, cs kubernetes.Interface, ns, name string) (*nadv1.NetworkAttachmentDefinition, error) {
	raw, err := cs.CoreV1().RESTClient().Get().
		AbsPath("/apis/k8s.cni.cncf.io/v1/namespaces", ns, "network-attachment-definitions", name).
		DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	nad := &nadv1.NetworkAttachmentDefinition{}
	if err := json.Unmarshal(raw, nad); err != nil {
		return nil, err
	}
	return nad, nil
}

func cmdAdd(args *skel.CmdArgs) error {
	c, err := begin(args)
	if err != nil {
		return err
	}
	conf, pa, cni, cluster := c.conf, c.pod, c.cni, c.cluster
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	result, err := cni.AddNetworkList(ctx, cluster, conf.runtime(args, pa, args.IfName))
	if err != nil {
		return fmt.Errorf("netattach: the cluster network %s: %w", cluster.Name, err)
	}
	if pa.K8S_POD_NAME == "" || conf.Kubeconfig == "" {
		return types.PrintResult(result, conf.CNIVersion)
	}
	added, err := attach(ctx, cni, conf, pa, args, cluster, result)
	if err != nil {
		for i := len(added) - 1; i >= 0; i-- {
			if l, e := confList(added[i].Config); e == nil {
				_ = cni.DelNetworkList(ctx, l, conf.runtime(args, pa, added[i].IfName))
			}
		}
		_ = cni.DelNetworkList(ctx, cluster, conf.runtime(args, pa, args.IfName))
		return err
	}
	return types.PrintResult(result, conf.CNIVersion)
}

// attach runs the pod's extra networks and writes its network-status; it returns what it added,
// for its caller to undo on an error.
func attach(ctx context.Context, cni libcni.CNI, conf *netConf, pa *podArgs, args *skel.CmdArgs,
	cluster *libcni.NetworkConfigList, clusterResult types.Result) ([]attachment, error) {
	cs, err := client(conf.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("netattach: %s: %w", conf.Kubeconfig, err)
	}
	ns, name := string(pa.K8S_POD_NAMESPACE), string(pa.K8S_POD_NAME)
	pod, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("netattach: pod %s/%s: %w", ns, name, err)
	}
	if uid := string(pa.K8S_POD_UID); uid != "" && string(pod.UID) != uid {
		return nil, fmt.Errorf("netattach: pod %s/%s is uid %s, not the sandbox's %s", ns, name, pod.UID, uid)
	}
	statuses, err := nadutils.CreateNetworkStatuses(clusterResult, cluster.Name, true, nil)
	if err != nil {
		return nil, fmt.Errorf("netattach: the cluster network's result: %w", err)
	}
	var added []attachment
	nets, err := nadutils.ParsePodNetworkAnnotation(pod)
	var none *nadv1.NoK8sNetworkError
	if err != nil && !errors.As(err, &none) {
		return nil, fmt.Errorf("netattach: pod %s/%s, annotation %s: %w", ns, name, nadv1.NetworkAttachmentAnnot, err)
	}
	for i, n := range nets {
		network := n.Namespace + "/" + n.Name
		nad, err := networkAttachment(ctx, cs, n.Namespace, n.Name)
		if err != nil {
			return added, fmt.Errorf("netattach: NetworkAttachmentDefinition %s: %w", network, err)
		}
		b, err := nadutils.GetCNIConfig(nad, conf.ConfDir)
		if err != nil {
			return added, fmt.Errorf("netattach: NetworkAttachmentDefinition %s: %w", network, err)
		}
		list, err := confList(b)
		if err != nil {
			return added, fmt.Errorf("netattach: NetworkAttachmentDefinition %s, spec.config: %w", network, err)
		}
		ifName := n.InterfaceRequest
		if ifName == "" {
			ifName = fmt.Sprintf("net%d", i+1)
		}
		r, err := cni.AddNetworkList(ctx, list, conf.runtime(args, pa, ifName))
		if err != nil {
			return added, fmt.Errorf("netattach: network %s on %s: %w", network, ifName, err)
		}
		added = append(added, attachment{Network: network, IfName: ifName, Config: list.Bytes})
		st, err := nadutils.CreateNetworkStatuses(r, network, false, nil)
		if err != nil {
			return added, fmt.Errorf("netattach: network %s's result: %w", network, err)
		}
		statuses = append(statuses, st...)
	}
	if err := save(conf, args.ContainerID, added); err != nil {
		return added, err
	}
	list := make([]nadv1.NetworkStatus, 0, len(statuses))
	for _, s := range statuses {
		list = append(list, *s)
	}
	if err := nadutils.SetNetworkStatus(cs, pod, list); err != nil {
		return added, fmt.Errorf("netattach: pod %s/%s: %w", ns, name, err)
	}
	return added, nil
}

func save(conf *netConf, containerID string, added []attachment) error {
	b, err := json.Marshal(state{Attachments: added})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(conf.StateDir, 0o700); err != nil {
		return fmt.Errorf("netattach: %w", err)
	}
	tmp := conf.statePath(containerID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("netattach: %w", err)
	}
	return os.Rename(tmp, conf.statePath(containerID))
}

// cmdDel undoes the attachments ADD saved (the last first), then the cluster network. An
// attachment's failure is reported after the rest are undone; DEL of what is already gone
// succeeds, as CNI asks.
func cmdDel(args *skel.CmdArgs) error {
	c, err := begin(args)
	if err != nil {
		return err
	}
	conf, pa, cni := c.conf, c.pod, c.cni
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var errs []string
	if b, err := os.ReadFile(conf.statePath(args.ContainerID)); err == nil {
		var st state
		if err := json.Unmarshal(b, &st); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", conf.statePath(args.ContainerID), err))
		}
		for i := len(st.Attachments) - 1; i >= 0; i-- {
			a := st.Attachments[i]
			l, err := confList(a.Config)
			if err == nil {
				err = cni.DelNetworkList(ctx, l, conf.runtime(args, pa, a.IfName))
			}
			if err != nil {
				errs = append(errs, fmt.Sprintf("network %s on %s: %v", a.Network, a.IfName, err))
			}
		}
	}
	if err := cni.DelNetworkList(ctx, c.cluster, conf.runtime(args, pa, args.IfName)); err != nil {
		errs = append(errs, fmt.Sprintf("the cluster network: %v", err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("netattach: %s", strings.Join(errs, "; "))
	}
	_ = os.Remove(conf.statePath(args.ContainerID))
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	c, err := begin(args)
	if err != nil {
		return err
	}
	return c.cni.CheckNetworkList(context.Background(), c.cluster, c.conf.runtime(args, c.pod, args.IfName))
}

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: cmdAdd, Del: cmdDel, Check: cmdCheck},
		cniversion.All, "netattach (Multus's part for tests/cluster's real nodes)")
}
