//go:build tools

// Package tools pins upstream commands that the local test cluster runs: the etcd server, and
// the etcdctl/etcdutl of the same release that the etcd image ships (backups and restores).
// Nothing here is part of the product.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
