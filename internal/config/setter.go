package config

import (
	"os"
	"os/user"
	"strconv"
)

// DefaultSetter is who sets a limit when the caller names nobody, the
// coord.Limit.By that fence limit, freeze and thaw and the dashboard record:
// "USER@HOSTNAME" (the uid when the user has no name).
func DefaultSetter() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return name + "@" + host
}
