//go:build tools

// Package tools pins CoreDNS, the real node's cluster DNS (the version Kubernetes 1.35's addon
// manifest names). Nothing here is part of the product.
package tools

import (
	_ "github.com/coredns/coredns"
)
