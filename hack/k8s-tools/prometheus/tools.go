//go:build tools

// Package tools pins an upstream command that the tests run (promtool check rules, promtool
// test rules). Nothing here is part of the product.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
