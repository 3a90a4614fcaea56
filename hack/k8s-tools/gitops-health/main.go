// Command gitops-health judges objects the way GitOps tools do, for the GitOps health test. It
// reads a JSON List from stdin and prints one line per object:
//
//	gitops-health kstatus        kstatus's verdict (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute,
//	                             the rules of Flux's health checks): "<status>\t<message>"
//	gitops-health argocd SCRIPT  the verdict of an Argo CD Lua health check (run by gopher-lua, as
//	                             Argo CD runs it, with the object as the global `obj`):
//	                             "<status>\t<message>"
//
// A test tool, never shipped.
package main

import (
	"fmt"
	"io"
	"os"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if len(os.Args) < 2 || (os.Args[1] == "argocd" && len(os.Args) != 3) {
		fail(2, "usage: gitops-health kstatus | gitops-health argocd SCRIPT (a JSON List on stdin)")
	}
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(2, "reading stdin: %v", err)
	}
	// The API machinery's decoder, so integers stay int64 as kstatus reads them.
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON(data); err != nil {
		fail(2, "stdin is not a JSON List: %v", err)
	}
	switch os.Args[1] {
	case "kstatus":
		for i := range list.Items {
			result, err := status.Compute(&list.Items[i])
			if err != nil {
				fail(1, "%v", err)
			}
			fmt.Printf("%s\t%s\n", result.Status, result.Message)
		}
	case "argocd":
		script, err := os.ReadFile(os.Args[2])
		if err != nil {
			fail(2, "reading the script: %v", err)
		}
		for i := range list.Items {
			health, message, err := argocd(string(script), list.Items[i].Object)
			if err != nil {
				fail(1, "%v", err)
			}
			fmt.Printf("%s\t%s\n", health, message)
		}
	default:
		fail(2, "unknown mode %q", os.Args[1])
	}
}

// argocd runs a health check script as Argo CD does: the object is the global `obj`, the script
// returns a table with `status` and `message`.
func argocd(script string, object map[string]interface{}) (string, string, error) {
	state := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer state.Close()
	state.SetGlobal("obj", toLua(state, object))
	if err := state.DoString(script); err != nil {
		return "", "", err
	}
	result, ok := state.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the script returned %s, not a table", state.Get(-1).Type())
	}
	return result.RawGetString("status").String(), result.RawGetString("message").String(), nil
}

// toLua converts decoded JSON into Lua values: objects and arrays into tables (arrays from 1).
func toLua(state *lua.LState, value interface{}) lua.LValue {
	switch v := value.(type) {
	case map[string]interface{}:
		table := state.NewTable()
		for key, item := range v {
			table.RawSetString(key, toLua(state, item))
		}
		return table
	case []interface{}:
		table := state.NewTable()
		for _, item := range v {
			table.Append(toLua(state, item))
		}
		return table
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case nil:
		return lua.LNil
	default:
		return lua.LString(fmt.Sprint(v))
	}
}

func fail(code int, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "gitops-health: "+format+"\n", args...)
	os.Exit(code)
}
