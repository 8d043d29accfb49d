package coordtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCapabilitiesComplete: every interface that package coord declares,
// other than Coordinator itself and Unwrapper, is an optional capability
// listed in capabilities, so that CheckDecorator checks it.
func TestCapabilitiesComplete(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var declared []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, ok := ts.Type.(*ast.InterfaceType); ok {
					declared = append(declared, ts.Name.Name)
				}
			}
			return true
		})
	}
	if len(declared) < 3 {
		t.Fatalf("found only the interfaces %v in package coord: is the path right?", declared)
	}
	var listed []string
	for _, cp := range capabilities {
		listed = append(listed, cp.name)
	}
	for _, name := range declared {
		if name != "Coordinator" && name != "Unwrapper" && !slices.Contains(listed, name) {
			t.Errorf("coord.%s is not in coordtest's capabilities: add it there", name)
		}
	}
}
