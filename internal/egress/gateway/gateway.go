// Package gateway assembles the egress gateway: configuration, the CA in
// vak's state directory, the receipts log, the proxy listeners, the
// policy-aware DNS server and the admin socket; it applies reloads (SIGHUP or
// admin) without dropping connections and revokes connections a new policy
// denies. `vak gateway` is a thin command around Serve, `vak gateway
// serve-native` around ServeOnDemand.
package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"vak/internal/egress/admin"
	"vak/internal/egress/asks"
	"vak/internal/egress/ca"
	"vak/internal/egress/dns"
	"vak/internal/egress/egressconfig"
	"vak/internal/egress/logins"
	"vak/internal/egress/policy"
	"vak/internal/egress/proxy"
	"vak/internal/egress/secrets"
	"vak/internal/errclass"
	"vak/internal/netpolicy"
	"vak/internal/paths"
	"vak/internal/receipts"
)

// Options configure a gateway. Listener fields override the config file
// when non-empty ("-" disables a listener).
type Options struct {
	// Load returns the validated configuration; it is called at start and
	// on every reload (required).
	Load func() (*egressconfig.Config, error)
	// ConfigFile names the configuration source in status reports.
	ConfigFile string
	// StateDir holds the CA (ca/), receipts (receipts/) and the default
	// admin socket (required).
	StateDir string
	// Session names this gateway run in receipts; empty means random.
	Session string

	Listen            string
	TransparentListen string
	TransparentMode   proxy.TransparentMode
	DNSListen         string
	AdminSocket       string
	Receipts          string

	// Getenv reads secret values from the environment; nil means os.Getenv.
	Getenv func(string) string
	// Logf logs; nil means log.Printf.
	Logf func(format string, args ...any)
	// HandleSIGHUP makes Run reload on SIGHUP.
	HandleSIGHUP bool
	// RequireNoForwarding refuses to start unless IP forwarding is off in
	// this network namespace (the gateway container of a proxied topology
	// must never route packets between its networks).
	RequireNoForwarding bool

	forwardFile string // tests; empty means IPForwardFile
}

// Gateway is a running gateway.
type Gateway struct {
	opts    Options
	started time.Time

	cfg      atomic.Pointer[egressconfig.Config]
	pol      atomic.Pointer[policy.Policy]
	sess     atomic.Pointer[secrets.Session]
	resolver atomic.Pointer[dns.Resolver]
	asks     atomic.Pointer[asks.Registry]

	ca       *ca.Authority
	caDir    string
	book     *dns.AddrBook
	receipts *receipts.Log
	// receiptsKey is the fingerprint of the receipts signing key.
	receiptsKey string
	proxy       *proxy.Proxy
	dnsSrv      *dns.Server
	adminSrv    *admin.Server

	explicitL    net.Listener
	transparentL net.Listener
	dnsUDP       net.PacketConn
	dnsTCP       net.Listener
	adminL       net.Listener
	adminPath    string

	// sessMu serialises building the session (apply, a learned login
	// token); cfgSecrets and providers are what it was last built from.
	sessMu     sync.Mutex
	cfgSecrets []*secrets.Secret
	providers  []logins.Provider
	logins     *logins.Store

	reloadMu   sync.Mutex
	reloads    int
	lastReload time.Time
	lastErr    string

	wg        sync.WaitGroup
	closeOnce sync.Once
	done      chan struct{}
}

// UnixPrefix marks a listener address that is a unix socket path
// ("unix:/path"): the transparent listener then takes PROXY v2 streams and
// the DNS listener DNS over TCP framing, both 0600 and checked for the
// peer's uid like the admin socket (the native fence, docs/gateway.md).
const UnixPrefix = "unix:"

// Addrs are the bound listener addresses ("" when disabled).
type Addrs struct {
	Proxy       string `json:"proxy,omitempty"`
	Transparent string `json:"transparent,omitempty"`
	DNS         string `json:"dns,omitempty"`
	Admin       string `json:"admin,omitempty"`
}

// CADir is the CA directory inside the state directory.
func CADir(stateDir string) string { return paths.GatewayCADir(stateDir) }

// DefaultAdminSocket is the admin socket inside the state directory.
func DefaultAdminSocket(stateDir string) string { return paths.GatewayAdminSocket(stateDir) }

// ReceiptsDir holds the receipts logs.
func ReceiptsDir(stateDir string) string { return paths.GatewayReceiptsDir(stateDir) }

// ReceiptsKeyDir holds the Ed25519 key that signs receipts (receipts.key,
// 0600) and its public half (receipts.pub).
func ReceiptsKeyDir(stateDir string) string { return paths.GatewayReceiptsKeyDir(stateDir) }

func newSession() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "gw-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

type resolverFunc func() *dns.Resolver

func (f resolverFunc) Lookup(ctx context.Context, name string) ([]netip.Addr, time.Duration, error) {
	return f().Lookup(ctx, name)
}

// New loads configuration and the CA, opens the receipts log and binds every
// listener; it fails (and binds nothing) on any error, so a gateway with an
// invalid rule never starts. Call Run to serve, Close to stop.
func New(opts Options) (_ *Gateway, err error) {
	if opts.RequireNoForwarding {
		f := opts.forwardFile
		if f == "" {
			f = IPForwardFile
		}
		if err := checkNoForwarding(f); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if opts.Load == nil || opts.StateDir == "" {
		return nil, errors.New("gateway: Load and StateDir are required")
	}
	if opts.Session == "" {
		opts.Session = newSession()
	}
	if opts.TransparentMode == 0 {
		opts.TransparentMode = proxy.ProxyProtocol
	}
	g := &Gateway{opts: opts, started: time.Now(), book: &dns.AddrBook{}, done: make(chan struct{})}
	defer func() {
		if err != nil {
			g.closeAll()
		}
	}()
	cfg, err := opts.Load()
	if err != nil {
		return nil, err
	}
	if cfg.Mode == netpolicy.None {
		g.logf("network.policy is %q: the gateway will deny everything", netpolicy.None)
	}
	if err := g.openLogins(); err != nil {
		return nil, err
	}
	if err := g.apply(cfg); err != nil {
		return nil, err
	}
	g.caDir = CADir(opts.StateDir)
	if g.ca, err = ca.LoadOrCreate(g.caDir); err != nil {
		return nil, err
	}
	roots, err := rootPool(cfg.Gateway.ExtraCABundles)
	if err != nil {
		return nil, err
	}
	rpath := pick(opts.Receipts, cfg.Gateway.Receipts, filepath.Join(ReceiptsDir(opts.StateDir), opts.Session+".jsonl"))
	key, err := receipts.LoadOrCreateKey(ReceiptsKeyDir(opts.StateDir))
	if err != nil {
		return nil, err
	}
	g.receiptsKey = receipts.KeyID(key.Public().(ed25519.PublicKey))
	if g.receipts, err = receipts.OpenSigned(rpath, key); err != nil {
		return nil, err
	}
	gc := cfg.Gateway
	g.proxy = &proxy.Proxy{
		Policy:  g.pol.Load,
		Secrets: g.sess.Load,
		Logins:  loginHook{g},
		Asks:    g.asking,
		CA:      g.ca,
		Resolve: func(ctx context.Context, name string) ([]netip.Addr, error) {
			a, _, err := g.resolver.Load().Lookup(ctx, name)
			return a, err
		},
		NamesFor: g.book.Names,
		Receipts: g.receipts,
		RootCAs:  roots,
		Limits: proxy.Limits{
			MaxHeaderBytes:        gc.MaxHeaderBytes,
			ReadHeaderTimeout:     gc.ReadHeaderTimeout,
			IdleTimeout:           gc.IdleTimeout,
			DialTimeout:           gc.DialTimeout,
			TLSHandshakeTimeout:   gc.TLSHandshake,
			ResponseHeaderTimeout: gc.ResponseHeader,
		},
		Session: opts.Session,
		Logf:    g.logf,
	}
	if addr := pick(opts.Listen, gc.Listen, ""); addr != "" && addr != "-" {
		if g.explicitL, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("gateway: proxy listener: %w", err)
		}
	}
	if addr := pick(opts.TransparentListen, gc.TransparentListen, ""); addr != "" && addr != "-" {
		if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
			// A unix socket (the native fence's forwarders): 0600, peers
			// of this uid only, like the admin socket.
			if g.transparentL, err = admin.Listen(path); err != nil {
				return nil, fmt.Errorf("gateway: transparent listener: %w", err)
			}
		} else if g.transparentL, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("gateway: transparent listener: %w", err)
		}
	}
	if addr := pick(opts.DNSListen, gc.DNSListen, ""); addr != "" && addr != "-" {
		if path, ok := strings.CutPrefix(addr, UnixPrefix); ok {
			// DNS over TCP framing on a unix socket (the native fence's
			// DNS relays), checked like the admin socket.
			if g.dnsTCP, err = admin.Listen(path); err != nil {
				return nil, fmt.Errorf("gateway: DNS listener: %w", err)
			}
		} else if g.dnsUDP, g.dnsTCP, err = listenDNS(addr); err != nil {
			return nil, err
		}
	}
	g.adminPath = pick(opts.AdminSocket, gc.AdminSocket, DefaultAdminSocket(opts.StateDir))
	if g.adminPath != "-" {
		if g.adminL, err = admin.Listen(g.adminPath); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// listenDNS listens for DNS on UDP and TCP on the same port. With port 0
// the UDP port is picked by the kernel and TCP may already be taken on
// it by someone else: then both are tried again on another port.
func listenDNS(addr string) (net.PacketConn, net.Listener, error) {
	_, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		udp, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: DNS listener: %w", err)
		}
		tcp, err := net.Listen("tcp", udp.LocalAddr().String())
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if port != "0" || !errors.Is(err, syscall.EADDRINUSE) || attempt == 20 {
			return nil, nil, fmt.Errorf("gateway: DNS TCP listener: %w", err)
		}
	}
}

func pick(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// rootPool is the system roots, the roots compiled into vak and extra PEM
// bundles.
func rootPool(bundles []string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	ca.AddCompiledRoots(pool)
	for _, b := range bundles {
		pem, err := os.ReadFile(b)
		if err != nil {
			return nil, fmt.Errorf("gateway: extra CA bundle: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gateway: extra CA bundle %s holds no PEM certificate", b)
		}
	}
	return pool, nil
}

// apply installs a validated configuration: policy, secrets (keeping the
// placeholders of secrets that still exist) and DNS settings. Listener and
// CA-bundle changes need a restart.
func (g *Gateway) apply(cfg *egressconfig.Config) error {
	secs, err := secrets.Load(cfg.Secrets, g.opts.Getenv)
	if err != nil {
		return err
	}
	pol := cfg.Policy
	if cfg.Mode == netpolicy.None {
		pol, _ = policy.New(nil)
	}
	if err := g.mergeImported(); err != nil {
		return err
	}
	g.sessMu.Lock()
	err = g.sessionLocked(secs, cfg.Logins)
	g.sessMu.Unlock()
	if err != nil {
		return err
	}
	g.resolver.Store(&dns.Resolver{Overrides: cfg.DNS.Overrides, Upstreams: cfg.DNS.Upstreams})
	g.applyAsk(cfg.Ask, cfg.AskTimeout)
	g.pol.Store(pol)
	g.cfg.Store(cfg)
	return nil
}

func (g *Gateway) logf(format string, args ...any) {
	if g.opts.Logf != nil {
		g.opts.Logf(format, args...)
		return
	}
	log.Printf("vak gateway: "+format, args...)
}

// Addrs returns the bound addresses.
func (g *Gateway) Addrs() Addrs {
	var a Addrs
	if g.explicitL != nil {
		a.Proxy = g.explicitL.Addr().String()
	}
	if g.transparentL != nil {
		a.Transparent = g.transparentL.Addr().String()
		if g.transparentL.Addr().Network() == "unix" {
			a.Transparent = UnixPrefix + a.Transparent
		}
	}
	if g.dnsUDP != nil {
		a.DNS = g.dnsUDP.LocalAddr().String()
	} else if g.dnsTCP != nil {
		a.DNS = UnixPrefix + g.dnsTCP.Addr().String()
	}
	if g.adminL != nil {
		a.Admin = g.adminPath
	}
	return a
}

// Run serves until ctx is done or Close is called.
func (g *Gateway) Run(ctx context.Context) error {
	if g.explicitL != nil {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := g.proxy.ServeExplicit(g.explicitL); err != nil {
				g.logf("proxy listener: %v", err)
			}
		}()
	}
	if g.transparentL != nil {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := g.proxy.ServeTransparent(g.transparentL, g.opts.TransparentMode); err != nil {
				g.logf("transparent listener: %v", err)
			}
		}()
	}
	if g.dnsUDP != nil || g.dnsTCP != nil {
		g.dnsSrv = &dns.Server{
			Policy:   g.pol.Load,
			Resolver: resolverFunc(g.resolver.Load),
			Book:     g.book,
			Receipt:  func(r receipts.Record) { _ = g.receipts.Append(r) },
			Secrets:  g.sess.Load,
			Session:  g.opts.Session,
			Sinkhole: func() netip.Addr { return g.cfg.Load().DNS.Sinkhole },
		}
		if err := g.dnsSrv.Serve(g.dnsUDP, g.dnsTCP); err != nil {
			g.Close()
			return err
		}
	}
	if g.adminL != nil {
		g.adminSrv = admin.Serve(g.adminL, g)
	}
	var hup chan os.Signal
	if g.opts.HandleSIGHUP {
		hup = make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
	}
	for {
		select {
		case <-ctx.Done():
			return g.Close()
		case <-g.done:
			return nil
		case <-hup:
			if err := g.Reload(); err != nil {
				g.logf("reload on SIGHUP failed, keeping the previous configuration: %v", err)
			} else {
				g.logf("reloaded configuration on SIGHUP")
			}
		}
	}
}

// Reload re-reads the configuration and applies it. Live connections stay
// up; idle upstream connections are dropped. An invalid configuration
// leaves the running one in place and returns the error.
func (g *Gateway) Reload() error {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg, err := g.opts.Load()
	if err == nil {
		err = g.apply(cfg)
	}
	g.lastReload = time.Now()
	if err != nil {
		g.lastErr = err.Error()
		return err
	}
	g.reloads++
	g.lastErr = ""
	g.proxy.PolicyChanged()
	return nil
}

// Revoke reloads and closes existing connections the new policy denies.
func (g *Gateway) Revoke() (int, error) {
	if err := g.Reload(); err != nil {
		return 0, err
	}
	return g.proxy.Revoke(), nil
}

// Env is NAME -> placeholder, for the sandbox's environment.
func (g *Gateway) Env() map[string]string { return g.sess.Load().Env() }

// CACert is the CA certificate (PEM).
func (g *Gateway) CACert() []byte { return g.ca.CertPEM() }

// Status is the report of `vak gateway status`.
type Status struct {
	Session       string        `json:"session"`
	PID           int           `json:"pid"`
	Started       time.Time     `json:"started"`
	ConfigFile    string        `json:"config_file,omitempty"`
	Mode          string        `json:"network_policy"`
	Listeners     Addrs         `json:"listeners"`
	Rules         int           `json:"rules"`
	Secrets       []string      `json:"secrets"`
	CAFingerprint string        `json:"ca_sha256"`
	CACertFile    string        `json:"ca_cert_file"`
	ReceiptsFile  string        `json:"receipts_file"`
	ReceiptsHead  receipts.Head `json:"receipts_head"`
	// ReceiptsKey is the fingerprint of the key that signs the receipts;
	// ReceiptsPubKey is the public key file verify uses.
	ReceiptsKey    string      `json:"receipts_key"`
	ReceiptsPubKey string      `json:"receipts_pubkey_file"`
	Proxy          proxy.Stats `json:"proxy"`
	// Procs is the process's GOMAXPROCS (see SetProcs).
	Procs      int        `json:"procs"`
	Reloads    int        `json:"reloads"`
	LastReload *time.Time `json:"last_reload,omitempty"`
	LastError  string     `json:"last_reload_error,omitempty"`
}

// Status reports the gateway's state (no secret values).
func (g *Gateway) Status() any {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	cfg := g.cfg.Load()
	var names []string
	for n := range g.sess.Load().Env() {
		names = append(names, n)
	}
	sort.Strings(names)
	st := Status{
		Session:        g.opts.Session,
		PID:            os.Getpid(),
		Started:        g.started,
		ConfigFile:     g.opts.ConfigFile,
		Mode:           string(cfg.Mode),
		Listeners:      g.Addrs(),
		Rules:          g.pol.Load().Len(),
		Secrets:        names,
		CAFingerprint:  g.ca.Fingerprint(),
		CACertFile:     filepath.Join(g.caDir, ca.CertFile),
		ReceiptsFile:   g.receipts.Path(),
		ReceiptsHead:   g.receipts.Head(),
		ReceiptsKey:    g.receiptsKey,
		ReceiptsPubKey: filepath.Join(ReceiptsKeyDir(g.opts.StateDir), receipts.PubKeyFile),
		Proxy:          g.proxy.Stats(),
		Procs:          runtime.GOMAXPROCS(0),
		Reloads:        g.reloads,
		LastError:      g.lastErr,
	}
	if !g.lastReload.IsZero() {
		t := g.lastReload
		st.LastReload = &t
	}
	return st
}

// Close stops every listener and connection and flushes the receipts.
func (g *Gateway) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.done)
		err = g.closeAll()
	})
	return err
}

func (g *Gateway) closeAll() error {
	if g.adminSrv != nil {
		g.adminSrv.Close()
	} else if g.adminL != nil {
		g.adminL.Close()
	}
	if g.adminL != nil {
		os.Remove(g.adminPath)
	}
	if g.dnsSrv != nil {
		g.dnsSrv.Shutdown()
	} else {
		if g.dnsUDP != nil {
			g.dnsUDP.Close()
		}
		if g.dnsTCP != nil {
			g.dnsTCP.Close()
		}
	}
	if g.proxy != nil {
		g.proxy.Close()
	}
	for _, l := range []net.Listener{g.explicitL, g.transparentL} {
		if l != nil {
			l.Close()
		}
	}
	g.wg.Wait()
	if g.receipts != nil {
		return g.receipts.Close()
	}
	return nil
}

// AdminSocket is the admin socket a command talks to: flag when set, else
// the default one in vak's state dir (an error there is errclass.Internal).
func AdminSocket(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	state, err := paths.StateDir()
	if err != nil {
		return "", errclass.Wrap(errclass.Internal, err)
	}
	return DefaultAdminSocket(state), nil
}

// CACertPEM is the gateway CA's certificate (PEM), the CA created in vak's
// state dir on first use (a state dir that cannot be made is
// errclass.Internal). The key never leaves the state dir.
func CACertPEM() ([]byte, error) {
	state, err := paths.EnsureStateDir()
	if err != nil {
		return nil, errclass.Wrap(errclass.Internal, err)
	}
	auth, err := ca.LoadOrCreate(CADir(state))
	if err != nil {
		return nil, err
	}
	return auth.CertPEM(), nil
}
