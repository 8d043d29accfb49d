package shards_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fence-dev/fence/internal/etcdtest"
	"github.com/fence-dev/fence/pkg/coord/etcd"
	"github.com/fence-dev/fence/pkg/shards"
)

// frozenHelperEnv names the etcd endpoint of the member process of
// TestFrozenMemberLeaseExpired.
const frozenHelperEnv = "FENCE_SHARDS_FROZEN_HELPER"

// frozenTTL is the leases' TTL in TestFrozenMemberLeaseExpired.
const frozenTTL = 2 * time.Second

// frozenHelper is a member of group "frozen" (one shard) on etcd at ep: it
// prints each Move as a JSON line, then, when the member ends, a line
// "err <revoked> <error>".
func frozenHelper(ep string) int {
	c, err := etcd.New(context.Background(), []string{ep}, etcd.WithPrefix("/frozen/"), etcd.WithDialTimeout(5*time.Second))
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	enc := json.NewEncoder(os.Stdout)
	m, err := shards.Join(context.Background(), c, "frozen", 1, shards.WithMember("m1"), shards.WithTTL(frozenTTL),
		shards.WithSettle(100*time.Millisecond), shards.OnMove(func(mv shards.Move) { enc.Encode(mv) }))
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	<-m.Done()
	fmt.Println("err", errors.Is(m.Err(), shards.ErrRevoked), m.Err())
	return 0
}

// TestFrozenMemberLeaseExpired (issue 30): a member process stopped
// (SIGSTOP) past its leases' TTL finds, when it resumes, that its shard's
// lease and its own expired: it says so (this process was paused; a
// shard reported is "lost"), not "revoked", whichever of its lease watch
// and its own timer notices first.
func TestFrozenMemberLeaseExpired(t *testing.T) {
	srv := etcdtest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), frozenHelperEnv+"="+srv.Endpoints()[0])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func(within time.Duration) (string, bool) {
		select {
		case l, ok := <-lines:
			return l, ok
		case <-time.After(within):
			return "", false
		}
	}
	if l, ok := next(30 * time.Second); !ok || !strings.Contains(l, `"Kind":"taken"`) {
		t.Fatalf("the member did not take its shard: %q", l)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*frozenTTL + time.Second)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		l, ok := next(30 * time.Second)
		if !ok {
			break
		}
		got = append(got, l)
		if strings.HasPrefix(l, "err ") {
			break
		}
	}
	memberErr := false
	for _, l := range got {
		var mv shards.Move
		switch {
		case strings.HasPrefix(l, "err "):
			memberErr = true
			if strings.HasPrefix(l, "err true") || !strings.Contains(l, "paused") {
				t.Errorf("the member ended with %q; want its lease lost because this process was paused, not revoked", l)
			}
		case json.Unmarshal([]byte(l), &mv) == nil && mv.Kind != "taken":
			if mv.Kind != "lost" || strings.Contains(mv.Reason, "revoked") || !strings.Contains(mv.Reason, "paused") {
				t.Errorf("after the freeze the shard was reported %s: %q; want lost, because this process was paused, not revoked", mv.Kind, mv.Reason)
			}
		}
	}
	if !memberErr {
		t.Errorf("after the freeze: %q; want the member ended", got)
	}
}
