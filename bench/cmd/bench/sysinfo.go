package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fence-dev/fence/bench/internal/stats"
)

// Machine says where the figures come from.
type Machine struct {
	CPU         string
	Cores       int
	Kernel      string
	Go          string
	Fence       string
	Etcd        string
	Etcdctl     string
	Hyperfine   string
	Flock       string
	EtcdDataDir string // "tmpfs (/dev/shm/...)"
	StateDir    string // file system of the local backend's state
}

func machineInfo(ctx context.Context, cfg *config) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	first := func(name string, args ...string) string {
		out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	m.Fence = first(cfg.fence, "version")
	m.Etcd = first(etcdBinary(), "--version")
	m.Etcdctl = first(cfg.etcdctl, "version")
	m.Hyperfine = first("hyperfine", "--version")
	m.Flock = first("flock", "--version")
	return m
}

// describeFS names the file system type of path.
func describeFS(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "unknown (" + path + ")"
	}
	name := "0x" + strconv.FormatInt(int64(st.Type), 16)
	switch st.Type {
	case unix.TMPFS_MAGIC:
		name = "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		name = "ext4"
	case unix.XFS_SUPER_MAGIC:
		name = "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		name = "btrfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		name = "overlayfs"
	}
	return name
}

// LoadStats is the 1-minute load average sampled during the run.
type LoadStats struct {
	Start, End float64
	During     stats.Summary
}

type loadSampler struct {
	stopc   chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []float64
	start   float64
}

func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

func startLoadSampler(every time.Duration) *loadSampler {
	s := &loadSampler{stopc: make(chan struct{}), start: loadavg()}
	s.samples = append(s.samples, s.start)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.stopc:
				return
			case <-t.C:
				s.mu.Lock()
				s.samples = append(s.samples, loadavg())
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *loadSampler) stop() LoadStats {
	close(s.stopc)
	s.wg.Wait()
	end := loadavg()
	return LoadStats{Start: s.start, End: end, During: stats.Of(append(s.samples, end))}
}
