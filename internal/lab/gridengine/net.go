package gridengine

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/bftrainer/bftrainer/internal/lab"
)

// network is the cell's private IPv4 /24: a bridge in the machine's
// network namespace holding the qmaster's address (.1), and one veth per
// exec host whose far end, inside the host's namespace, holds .2, .3, …
type network struct {
	bridge string
	prefix string // "10.X.Y"
	veths  []string
}

// makeNetwork chooses a free /24 in 10.200.0.0-10.254.255.0 and a free
// bridge name, under a machine-wide lock (other cells, of other tests,
// may be choosing at the same time), and creates the bridge.
func (c *Cell) makeNetwork(context.Context) error {
	unlock, err := machineLock()
	if err != nil {
		return err
	}
	defer unlock()
	used, err := usedNets()
	if err != nil {
		return err
	}
	n := &network{}
	for range 200 {
		p := fmt.Sprintf("10.%d.%d", 200+mrand.IntN(55), mrand.IntN(256))
		_, cand, _ := net.ParseCIDR(p + ".0/24")
		if !overlaps(cand, used) {
			n.prefix = p
			break
		}
	}
	if n.prefix == "" {
		return fmt.Errorf("no free /24 in 10.200.0.0/8-10.254.255.0")
	}
	for range 50 {
		b := make([]byte, 2)
		rand.Read(b)
		name := "bge" + hex.EncodeToString(b)
		if _, err := net.InterfaceByName(name); err != nil {
			n.bridge = name
			break
		}
	}
	if n.bridge == "" {
		return fmt.Errorf("no free bridge name")
	}
	if err := runIn([]byte(fmt.Sprintf("link add %s type bridge\naddr add %s.1/24 dev %s\nlink set %s up\n",
		n.bridge, n.prefix, n.bridge, n.bridge)), "ip", "-batch", "-"); err != nil {
		run("ip", "link", "del", n.bridge)
		return err
	}
	c.net = n
	c.addr[c.Master] = n.prefix + ".1"
	for i, h := range c.Hosts {
		c.addr[h] = fmt.Sprintf("%s.%d", n.prefix, i+2)
	}
	return nil
}

// machineLock takes the machine-wide lock of every cell's network and
// port choices. It is taken on sge_qmaster's binary, opened read-only:
// every cell of this machine runs that same file, and flock(2) needs no
// write access, so the lock writes nothing anywhere (no fixed file in
// /tmp).
func machineLock() (func(), error) {
	f, err := os.Open(qmasterBin)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// usedNets returns the machine's IPv4 networks: its interfaces' and its
// routes' (except the default route).
func usedNets() ([]*net.IPNet, error) {
	var nets []*net.IPNet
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			nets = append(nets, n)
		}
	}
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nets, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || fs[0] == "Iface" {
			continue
		}
		dst, err1 := strconv.ParseUint(fs[1], 16, 32)
		mask, err2 := strconv.ParseUint(fs[7], 16, 32)
		if err1 != nil || err2 != nil || mask == 0 {
			continue
		}
		// /proc/net/route is in host byte order (little-endian here).
		ip, m := make(net.IP, 4), make(net.IPMask, 4)
		binary.LittleEndian.PutUint32(ip, uint32(dst))
		binary.LittleEndian.PutUint32(m, uint32(mask))
		nets = append(nets, &net.IPNet{IP: ip, Mask: m})
	}
	return nets, sc.Err()
}

func overlaps(n *net.IPNet, used []*net.IPNet) bool {
	for _, u := range used {
		if u.Contains(n.IP) || n.Contains(u.IP.Mask(u.Mask)) {
			return true
		}
	}
	return false
}

// writeHosts writes the cell's hosts file, bind-mounted over /etc/hosts
// in every namespace of the cell: every name resolves to exactly one
// address and back, as Grid Engine checks both ways.
func (c *Cell) writeHosts() error {
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n")
	fmt.Fprintf(&b, "%s\t%s\n", c.addr[c.Master], c.Master)
	for _, h := range c.Hosts {
		fmt.Fprintf(&b, "%s\t%s\n", c.addr[h], h)
	}
	return os.WriteFile(c.path("hosts"), []byte(b.String()), 0o644)
}

// holderScript runs as a namespace's first process: it names the host,
// mounts the cell's hosts file and then only holds the namespaces open
// (the daemons join them with nsenter, and a stopped execd can start
// again in the same host).
const holderScript = `hostname "$0" && mount --bind "$1" /etc/hosts && ip link set lo up && exec sleep infinity`

// makeNamespaces starts the qmaster's host (mount and UTS namespaces)
// and every exec host (network too), and wires each exec host's veth to
// the bridge.
func (c *Cell) makeNamespaces(ctx context.Context) error {
	if err := c.writeHosts(); err != nil {
		return err
	}
	if err := c.holder(ctx, c.Master, "-m", "-u"); err != nil {
		return err
	}
	for i, h := range c.Hosts {
		if err := c.holder(ctx, h, "-m", "-u", "-n"); err != nil {
			return err
		}
		outer, inner := fmt.Sprintf("%sv%d", c.net.bridge, i+1), fmt.Sprintf("%sp%d", c.net.bridge, i+1)
		c.net.veths = append(c.net.veths, outer)
		if err := runIn([]byte(fmt.Sprintf("link add %s type veth peer name %s\nlink set %s master %s up\nlink set %s netns %d\n",
			outer, inner, outer, c.net.bridge, inner, c.ns[h].pid())), "ip", "-batch", "-"); err != nil {
			return err
		}
		if err := runIn([]byte(fmt.Sprintf("addr add %s/24 dev %s\nlink set %s up\n", c.addr[h], inner, inner)),
			"nsenter", "-t", strconv.Itoa(c.ns[h].pid()), "-n", "ip", "-batch", "-"); err != nil {
			return err
		}
	}
	return nil
}

// holder starts a host's namespace holder and waits until it holds them
// (its script has exec'd sleep).
func (c *Cell) holder(ctx context.Context, host string, flags ...string) error {
	args := append(append(flags, "--propagation", "private", "--", "/bin/sh", "-c", holderScript), host, c.path("hosts"))
	cmd := exec.Command("unshare", args...)
	cmd.Env = []string{"PATH=" + sbinPath, tokenVar + "=" + c.token}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := startProc("namespaces of "+host, cmd)
	if err != nil {
		return err
	}
	c.ns[host] = p
	comm := filepath.Join("/proc", strconv.Itoa(p.pid()), "comm")
	return lab.Poll(ctx, 10*time.Second, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("namespaces of %s: %v: %s", host, p.err, strings.TrimSpace(out.String()))
		}
		b, _ := os.ReadFile(comm)
		return strings.TrimSpace(string(b)) == "sleep", nil
	})
}

// freePort returns a TCP port nothing listens on, below the ephemeral
// range, for the qmaster (which listens on every address of the
// machine's network namespace).
func freePort() (int, error) {
	for range 100 {
		p := 20000 + mrand.IntN(12700)
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port in 20000-32699")
}

// removeNetwork deletes the bridge and any veth left (a veth dies with
// the namespace that holds its far end).
func (c *Cell) removeNetwork() error {
	if c.net == nil {
		return nil
	}
	for _, v := range c.net.veths {
		if _, err := net.InterfaceByName(v); err == nil {
			run("ip", "link", "del", v)
		}
	}
	if _, err := net.InterfaceByName(c.net.bridge); err == nil {
		return run("ip", "link", "del", c.net.bridge)
	}
	return nil
}
