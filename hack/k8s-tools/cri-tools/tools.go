//go:build tools

// Package tools pins crictl, which stops and removes the real node's Pod sandboxes through the
// CRI at cluster-down (so the network plugin tears their networks down). Nothing here is part of
// the product.
package tools

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
