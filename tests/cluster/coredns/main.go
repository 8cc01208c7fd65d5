// Command coredns is the cluster DNS of the local cluster's real nodes: CoreDNS of the pinned
// release with only the plugins its Corefile uses (cluster.sh writes it), built from CoreDNS's
// own Go module, as CoreDNS documents for a build with a chosen set of plugins.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
