//go:build tools

// Package tools pins the control plane of the oldest Kubernetes minor app-operator supports, which
// `make test` runs the CRDs, RBAC and operator against (the kubelet and kubectl stay the pinned
// release's: the node is not under test there). Nothing here is part of the product.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
