//go:build tools

// Package tools pins the previous etcd release, which the EtcdCluster upgrade test starts from,
// with the etcdctl/etcdutl its image ships. Nothing here is part of the product.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
