package sandbox

import (
	"context"
	"errors"
	"os/exec"
	"testing"

	"vak/internal/errclass"
)

type fakeWrapper struct{ fake }

func (fakeWrapper) Scope() Scope                             { return ScopeCommand }
func (fakeWrapper) Wrap(Command) ([]string, error)           { return nil, nil }
func (fakeWrapper) HostEnv() []string                        { return nil }
func (fakeWrapper) Remove(context.Context, string) error     { return nil }
func (fakeWrapper) WrapperFailed(context.Context, int) error { return nil }

type fakeProcess struct{ fake }

func (fakeProcess) PrepareWorker(context.Context, ProcessPolicy, *exec.Cmd) (*WorkerLaunch, error) {
	return nil, nil
}

type fakeFence struct {
	fakeProcess
	err error
}

func (f fakeFence) FenceNetwork() error { return f.err }

// TestProxiedNetwork: how each kind of backend attaches a proxied network,
// and that an attachment of the wrong kind, or none available, is refused
// as unavailable (exit 69), never run without it.
func TestProxiedNetwork(t *testing.T) {
	noUserNS := errors.New("user namespaces are unavailable")
	topology := &NetworkAttachment{Mode: "container:x"}
	fence := &NetworkAttachment{Fence: &Fence{DataSocket: "/d", DNSSocket: "/n", TrustDir: "/t"}}
	for _, tc := range []struct {
		name    string
		b       Backend
		kind    NetworkKind
		wantErr error
		refuse  []*NetworkAttachment // attachments RefuseNetwork must refuse
		accept  []*NetworkAttachment
	}{
		{"command-scoped joins a topology", fakeWrapper{fake{"docker"}}, NetworkTopology, nil, []*NetworkAttachment{fence}, []*NetworkAttachment{nil, topology}},
		{"a fence provider fences its namespace", fakeFence{fakeProcess{fake{"landlock"}}, nil}, NetworkFence, nil, []*NetworkAttachment{topology}, []*NetworkAttachment{nil, fence}},
		{"a fence provider that cannot here", fakeFence{fakeProcess{fake{"landlock"}}, noUserNS}, 0, noUserNS, []*NetworkAttachment{topology, fence}, []*NetworkAttachment{nil}},
		{"a process backend without a fence", fakeProcess{fake{"seatbelt"}}, 0, ErrNoNetwork, []*NetworkAttachment{topology, fence}, []*NetworkAttachment{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, err := ProxiedNetwork(tc.b)
			if kind != tc.kind || !errors.Is(err, tc.wantErr) {
				t.Fatalf("ProxiedNetwork = %v, %v; want %v, %v", kind, err, tc.kind, tc.wantErr)
			}
			if err != nil && (!errors.Is(err, ErrNoNetwork) || !errors.Is(err, errclass.Unavailable)) {
				t.Errorf("error %v is not ErrNoNetwork (unavailable)", err)
			}
			for _, a := range tc.refuse {
				if err := RefuseNetwork(tc.b, a); !errors.Is(err, ErrNoNetwork) {
					t.Errorf("RefuseNetwork(%+v) = %v, want ErrNoNetwork", a, err)
				}
			}
			for _, a := range tc.accept {
				if err := RefuseNetwork(tc.b, a); err != nil {
					t.Errorf("RefuseNetwork(%+v) = %v, want nil", a, err)
				}
			}
		})
	}
}
