// Command etcd is the etcd server of the pinned release, built from its Go module so that the
// local control plane needs no download (Debian's etcd is older than the API server accepts).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
