package local

import (
	"os"
	"strings"
	"sync"
)

// bootID identifies the current boot ("" where unknown: not Linux). Boot
// clock readings (clock.Boot) and process IDs are comparable only under the
// same boot id.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})
