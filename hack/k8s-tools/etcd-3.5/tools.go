//go:build tools

// Package tools pins the previous etcd release, which the EtcdCluster upgrade test starts from.
// Nothing here is part of the product.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
