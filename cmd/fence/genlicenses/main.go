// Command genlicenses writes the licences of what is compiled into the fence
// binary (the Go modules its packages come from, and Go's standard library),
// under DIR (default ., the repository root):
//
//	packaging/third-party-licenses.txt  every module's licence text, and its
//	                                    NOTICE where it has one
//	packaging/deb/copyright             fence's Debian copyright file, whose
//	                                    header lists each module's licence
//
// Run it from the repository root after a change of go.mod:
//
//	go run ./cmd/fence/genlicenses .
//
// The modules are those of `go list -deps ./cmd/fence` (what the shipped
// binary links in, not every module go.mod names); each licence is identified by
// github.com/google/licensecheck, the scanner pkg.go.dev uses. A module
// without a licence file, or one whose licence it cannot identify, is an
// error: a package must not ship what it may not ship. TestLicensesAreCurrent
// fails when the committed files differ from what it writes.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/licensecheck"
)

func main() {
	dir := "."
	switch len(os.Args) {
	case 1:
	case 2:
		dir = os.Args[1]
	default:
		fmt.Fprintln(os.Stderr, "usage: go run ./cmd/fence/genlicenses [DIR]")
		os.Exit(2)
	}
	if err := Generate(dir, dir); err != nil {
		fmt.Fprintf(os.Stderr, "genlicenses: %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintln(os.Stderr, "genlicenses: wrote packaging/third-party-licenses.txt, packaging/deb/copyright")
}

// Module is one module compiled into fence.
type Module struct {
	Path, Version string
	Dir           string
	Licence       string // SPDX identifiers, "AND" between several
	Files         []file // its licence and notice files
}

type file struct{ name, text string }

// licenceNames are the file names read as a module's licence or notice.
var licenceNames = []string{"LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "COPYING", "LICENSE-APACHE", "LICENSE-MIT", "NOTICE", "NOTICE.md", "NOTICE.txt"}

// Generate writes the files under outDir from the module of the repository
// at repo.
func Generate(repo, outDir string) error {
	mods, err := Modules(repo)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(outDir, "packaging", "deb"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(outDir, "packaging", "third-party-licenses.txt"), texts(mods), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(outDir, "packaging", "deb", "copyright"), copyright(mods), 0o644)
}

// Modules lists what `go list -deps ./cmd/fence` links in, in path order,
// Go's standard library first, each with its licence.
func Modules(repo string) ([]Module, error) {
	cmd := exec.Command("go", "list", "-deps", "-json=Standard,Module", "./cmd/fence")
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	type pkg struct {
		Standard bool
		Module   *struct {
			Path, Version, Dir string
			Main               bool
			Replace            *struct{ Path, Version, Dir string }
		}
	}
	seen := map[string]bool{}
	var mods []Module
	std := false
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		switch {
		case p.Standard:
			std = true
		case p.Module != nil && !p.Module.Main && !seen[p.Module.Path]:
			seen[p.Module.Path] = true
			m := Module{Path: p.Module.Path, Version: p.Module.Version, Dir: p.Module.Dir}
			if r := p.Module.Replace; r != nil {
				m.Version, m.Dir = r.Version, r.Dir
			}
			mods = append(mods, m)
		}
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	if std {
		root, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOROOT: %v", err)
		}
		ver, err := exec.Command("go", "env", "GOVERSION").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOVERSION: %v", err)
		}
		// The major release only: a patch release of Go does not change
		// the licence, and the files should not change with it.
		v := strings.TrimSpace(string(ver))
		if parts := strings.Split(v, "."); len(parts) > 2 {
			v = strings.Join(parts[:2], ".")
		}
		mods = append([]Module{{Path: "Go standard library", Version: v, Dir: strings.TrimSpace(string(root))}}, mods...)
	}
	for i := range mods {
		if err := mods[i].read(); err != nil {
			return nil, err
		}
	}
	return mods, nil
}

// read finds m's licence and notice files and identifies its licence.
func (m *Module) read() error {
	var ids []string
	for _, n := range licenceNames {
		b, err := os.ReadFile(filepath.Join(m.Dir, n))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), "\r\n", "\n")
		m.Files = append(m.Files, file{n, text})
		if strings.HasPrefix(n, "NOTICE") {
			continue
		}
		cov := licensecheck.Scan(b)
		for _, match := range cov.Match {
			if !match.IsURL && !slices.Contains(ids, match.ID) {
				ids = append(ids, match.ID)
			}
		}
	}
	switch {
	case len(m.Files) == 0:
		return fmt.Errorf("%s %s: no licence file in %s", m.Path, m.Version, m.Dir)
	case len(ids) == 0:
		return fmt.Errorf("%s %s: licence not identified (%s)", m.Path, m.Version, m.Files[0].name)
	}
	m.Licence = strings.Join(ids, " AND ")
	return nil
}

// texts is the third-party licence file: what each module asks to be given
// with the binary.
func texts(mods []Module) []byte {
	var b bytes.Buffer
	b.WriteString("The fence binary contains code from the following, under their licences, whose texts follow.\n")
	b.WriteString("Generated by `go run ./cmd/fence/genlicenses .`; do not edit.\n\n")
	for _, m := range mods {
		fmt.Fprintf(&b, "  %-60s %-38s %s\n", m.Path, m.Version, m.Licence)
	}
	first := map[string]string{} // a text already given: by whom
	for _, m := range mods {
		for _, f := range m.Files {
			fmt.Fprintf(&b, "\n%s\n%s %s: %s\n%s\n\n", strings.Repeat("=", 78), m.Path, m.Version, f.name, strings.Repeat("=", 78))
			text := strings.TrimRight(f.text, "\n")
			if by, ok := first[text]; ok {
				fmt.Fprintf(&b, "The same text as %s above.\n", by)
				continue
			}
			first[text] = m.Path + "'s " + f.name
			b.WriteString(text)
			b.WriteString("\n")
		}
	}
	return b.Bytes()
}

// copyright is the Debian copyright file (machine-readable format 1.0).
func copyright(mods []Module) []byte {
	var b bytes.Buffer
	b.WriteString(`Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: fence
Upstream-Contact: fence maintainers <fence@fence.dev>
Source: https://github.com/fence-dev/fence
Comment: /usr/bin/fence is statically linked with the Go modules below,
 each under its own licence; their full texts, with each module's
 copyright notices and NOTICE files, are in
 /usr/share/doc/fence/third-party-licenses.txt.
 Generated by go run ./cmd/fence/genlicenses . (do not edit).
 .
`)
	for _, m := range mods {
		fmt.Fprintf(&b, " %s %s: %s\n", m.Path, m.Version, m.Licence)
	}
	b.WriteString(`
Files: *
Copyright: 2026 The fence authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License");
 you may not use this file except in compliance with the License.
 You may obtain a copy of the License at
 .
     http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS,
 WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 See the License for the specific language governing permissions and
 limitations under the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
`)
	return b.Bytes()
}
