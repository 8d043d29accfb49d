package supervise

import (
	"os"
	"testing"
)

// TestOrderPipeTakesOrdersBeforeItsEnd: the orders fence wrote before it
// died come with the end of the pipe, in one take: they are taken (a start
// order among them), and the end is reported with them. Dropping them with
// the end left a watchdog without its start order, and the lease to its
// TTL.
func TestOrderPipeTakesOrdersBeforeItsEnd(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := w.WriteString(`{"op":"start","spec":{"path":"/bin/true","args":["true"],"env":null,"signal":15,"grace":0,"lease_stop":1}}` + "\n" +
		`{"op":"extend","lease_stop":2}` + "\n" + `{"op":"ext`); err != nil {
		t.Fatal(err)
	}
	w.Close()
	p, err := newOrderPipe(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	orders, ended := p.take()
	if !ended || len(orders) != 2 || orders[0].Op != opStart || orders[0].Spec == nil || orders[1].Op != opExtend || orders[1].LeaseStop != 2 {
		t.Fatalf("take = %+v, ended %v; want the start and the extend orders, and the end (the partial last line dropped)", orders, ended)
	}
	if orders, ended := p.take(); !ended || len(orders) != 0 {
		t.Fatalf("take after the end = %+v, %v; want nothing, ended", orders, ended)
	}
}
