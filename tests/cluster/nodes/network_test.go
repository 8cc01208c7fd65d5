package nodes

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The second network every real node has (tests/cluster/nodes.sh): the NetworkAttachmentDefinition
// adam-replication (macvlan on the nodes' eth1, addresses from whereabouts), attached by netattach
// (tests/cluster/netattach, in Multus's place) as net1 of each pod that names it.
const (
	secondNetwork       = "adam-replication"
	secondNetworkSubnet = "10.246.0.0/24"
	replicationPort     = 7071
)

// attachmentStatus is one entry of a pod's k8s.v1.cni.cncf.io/network-status annotation.
type attachmentStatus struct {
	Name      string   `json:"name"`
	Interface string   `json:"interface"`
	IPs       []string `json:"ips"`
	Default   bool     `json:"default"`
}

// secondAddress is the pod's address on the second network as its network-status gives it, after
// checking that the annotation also names the pod network's attachment (eth0, the pod's IP) as
// the default one.
func secondAddress(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	text := p.Annotations["k8s.v1.cni.cncf.io/network-status"]
	var statuses []attachmentStatus
	if err := json.Unmarshal([]byte(text), &statuses); err != nil {
		t.Errorf("%s: network-status %q: %v", p.Name, text, err)
		return ""
	}
	_, subnet, _ := net.ParseCIDR(secondNetworkSubnet)
	var def, second *attachmentStatus
	for i := range statuses {
		s := &statuses[i]
		switch {
		case s.Default:
			def = s
		case s.Name == p.Namespace+"/"+secondNetwork:
			second = s
		}
	}
	if def == nil || len(def.IPs) == 0 || def.IPs[0] != p.Status.PodIP {
		t.Errorf("%s: network-status names no default attachment with the pod's IP %s: %s", p.Name, p.Status.PodIP, text)
	}
	if second == nil || second.Interface != "net1" || len(second.IPs) == 0 || !subnet.Contains(net.ParseIP(second.IPs[0])) {
		t.Errorf("%s: network-status has no net1 attachment %s/%s in %s: %s", p.Name, p.Namespace, secondNetwork, secondNetworkSubnet, text)
		return ""
	}
	return second.IPs[0]
}

// podMetric reads one counter of a pod's /metrics, by its pod IP (routed from this machine).
func podMetric(p *corev1.Pod, name string) (float64, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	r, err := c.Get(fmt.Sprintf("http://%s:9090/metrics", p.Status.PodIP))
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s has no %s", p.Name, name)
}

// inPod runs a command in the pod's container and returns its output.
func inPod(t *testing.T, p *corev1.Pod, args ...string) (string, error) {
	t.Helper()
	out, errs, err := run("", "kubectl", append([]string{"exec", "-n", p.Namespace, p.Name,
		"--request-timeout=10s", "--"}, args...)...)
	if err != nil {
		return "", fmt.Errorf("kubectl exec %s -- %v: %v: %s", p.Name, args, err, errs)
	}
	return out, nil
}

// sentBytes is what /proc/net/dev inside the pod counts as sent on interface `ifname`.
func sentBytes(t *testing.T, p *corev1.Pod, ifname string) (uint64, error) {
	out, err := inPod(t, p, "cat", "/proc/net/dev")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out, "\n") {
		name, counters, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(name) != ifname {
			continue
		}
		f := strings.Fields(counters)
		if len(f) < 9 {
			break
		}
		return strconv.ParseUint(f[8], 10, 64) // receive has 8 columns, then transmit bytes
	}
	return 0, fmt.Errorf("%s has no interface %s in /proc/net/dev", p.Name, ifname)
}

// connections are the pod's established TCP connections over IPv4, local and remote
// address:port, from /proc/net/tcp and /proc/net/tcp6 (gRPC's sockets are dual-stack: an IPv4
// peer shows there as ::ffff:a.b.c.d).
func connections(t *testing.T, p *corev1.Pod) ([][2]string, error) {
	out, err := inPod(t, p, "cat", "/proc/net/tcp", "/proc/net/tcp6")
	if err != nil {
		return nil, err
	}
	var conns [][2]string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[3] != "01" { // ESTABLISHED (headers and other states skipped)
			continue
		}
		local, ok1, err1 := procAddress(f[1])
		remote, ok2, err2 := procAddress(f[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: /proc/net/tcp line %q: %v %v", p.Name, line, err1, err2)
		}
		if ok1 && ok2 {
			conns = append(conns, [2]string{local, remote})
		}
	}
	return conns, nil
}

// procAddress turns /proc/net/tcp's "0100007F:1BA7" (or tcp6's IPv4-mapped
// "0000000000000000FFFF00000100007F:1BA7") into "127.0.0.1:7071"; false for an IPv6 address. Each
// 32-bit word is in the kernel's (little-endian) byte order.
func procAddress(s string) (string, bool, error) {
	host, port, ok := strings.Cut(s, ":")
	b, err := hex.DecodeString(host)
	if !ok || err != nil || (len(b) != 4 && len(b) != 16) {
		return "", false, fmt.Errorf("address %q", s)
	}
	n, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return "", false, fmt.Errorf("port in %q", s)
	}
	if len(b) == 16 {
		if strings.ToUpper(host[:24]) != "0000000000000000FFFF0000" {
			return "", false, nil
		}
		b = b[12:]
	}
	return net.JoinHostPort(net.IPv4(b[3], b[2], b[1], b[0]).String(), strconv.FormatUint(n, 10)), true, nil
}

// checkSecondNetwork: each parameter server of the job has its net1 on the second network (the
// network-status netattach wrote), listens for replication there (its log), sent at least the
// bytes it forwarded to its copies through net1 (/proc/net/dev in the pod against its
// adam_ps_forwarded_bytes_total), and holds no connection to another parameter server on the pod
// network, while some connection between two of them runs on the second network. With everyForwards,
// every server must have forwarded (all are primaries of some shards when the job starts; one made
// again after a fault may hold copies only).
// jobNamed is job(), for a function whose parameter of that name hides it.
var jobNamed = job

func checkSecondNetwork(t *testing.T, ns, job string, everyForwards bool) {
	t.Helper()
	// A server whose container was just killed, or whose pod was just made again, is back first
	// (ready, its sandbox's network-status written): what is checked is where the servers
	// replicate, not how soon they restart (reading one mid-restart found no container to exec in).
	var pods []corev1.Pod
	want := len(podsOf(t, ns, "adam.dev/job="+job+",adam.dev/role=ps"))
	if n, found, _ := unstructured.NestedInt64(jobNamed(t, ns, job).Object, "spec", "roles", "parameterServer", "replicas"); found {
		want = int(n)
	}
	eventually(t, 120*time.Second, job+"'s parameter servers ready on their networks", func() bool {
		pods = podsOf(t, ns, "adam.dev/job="+job+",adam.dev/role=ps")
		if len(pods) < want {
			return false
		}
		for i := range pods {
			if !ready(t, ns, pods[i].Name) || pods[i].Annotations["k8s.v1.cni.cncf.io/network-status"] == "" {
				return false
			}
		}
		return true
	})
	onPods, onSecond := map[string]string{}, map[string]string{}
	for i := range pods {
		p := &pods[i]
		onPods[p.Status.PodIP] = p.Name
		ip := secondAddress(t, p)
		if ip == "" {
			continue
		}
		onSecond[ip] = p.Name
		logs, _, _ := run("", "kubectl", "logs", "-n", ns, p.Name, "--request-timeout=10s")
		if want := fmt.Sprintf("replication traffic on %s:%d (%s)", ip, replicationPort, secondNetwork); !strings.Contains(logs, want) {
			t.Errorf("%s does not log %q", p.Name, want)
		}
	}
	var forwardedAll float64
	replicating := 0
	for i := range pods {
		p := &pods[i]
		var forwarded float64
		if everyForwards {
			eventually(t, 60*time.Second, p.Name+" forwarding to its copies", func() bool {
				forwarded, _ = podMetric(p, "adam_ps_forwarded_bytes_total")
				return forwarded > 0
			})
		} else if v, err := podMetric(p, "adam_ps_forwarded_bytes_total"); err == nil {
			forwarded = v
		}
		forwardedAll += forwarded
		sent, err := sentBytes(t, p, "net1")
		if err != nil {
			t.Error(err)
			continue
		}
		eth0, _ := sentBytes(t, p, "eth0")
		t.Logf("%s: forwarded %.2f MB to its copies; sent %.2f MB on net1 (second network), %.2f MB on eth0",
			p.Name, forwarded/1e6, float64(sent)/1e6, float64(eth0)/1e6)
		if float64(sent) < forwarded {
			t.Errorf("%s forwarded %.0f bytes to its copies but sent only %d on net1", p.Name, forwarded, sent)
		}
		conns, err := connections(t, p)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, c := range conns {
			lh, _, _ := net.SplitHostPort(c[0])
			rh, rp, _ := net.SplitHostPort(c[1])
			_, lp, _ := net.SplitHostPort(c[0])
			if from, ok := onPods[lh]; ok {
				if to, ok := onPods[rh]; ok && from != to {
					t.Errorf("%s and %s talk over the pod network (%s -> %s)", from, to, c[0], c[1])
				}
			}
			_, a := onSecond[lh]
			_, b := onSecond[rh]
			if a && b && (rp == strconv.Itoa(replicationPort) || lp == strconv.Itoa(replicationPort)) {
				replicating++
			}
		}
	}
	if forwardedAll <= 0 {
		t.Errorf("no parameter server of %s forwarded anything to its copies", job)
	}
	if replicating == 0 {
		t.Errorf("no parameter server of %s holds a replication connection on the second network", job)
	}
}
