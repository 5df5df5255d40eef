package trainer

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// elasticControl is one connection to an elastic store process's control
// port (docs/elastic.md §2): a request line, one reply line, `OK
// [payload]` or `ERR message`. The store process serialises requests.
// The connection opens with HELLO (the store answers a fresh nonce);
// every request then carries controlMAC over that nonce and its sequence
// number on the connection.
type elasticControl struct {
	conn  net.Conn
	r     *bufio.Reader
	key   []byte // the run's control key
	nonce string
	seq   int
}

// controlTimeout bounds one request. The store process answers in
// microseconds, or, while a worker stopped in the middle of a store request
// holds torch's server, once the store cuts that worker off: after its
// --peer-timeout (3 s, python/bftrainer_elastic/server.py). Beyond that it
// is gone; the margin is for a loaded host.
const controlTimeout = 10 * time.Second

func dialControl(ctx context.Context, port int, secret string) (*elasticControl, error) {
	if port <= 0 {
		return nil, fmt.Errorf("elastic store: no control port recorded")
	}
	if secret == "" {
		return nil, fmt.Errorf("elastic store: no run secret recorded")
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("elastic store control: %w", err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	ec := &elasticControl{conn: c, r: bufio.NewReader(c), key: deriveKey(secret, "control")}
	if ec.nonce, err = ec.send("HELLO"); err != nil {
		c.Close()
		return nil, err
	}
	return ec, nil
}

func (c *elasticControl) close() { c.conn.Close() }

// request sends one line with its proof and returns the reply's payload.
func (c *elasticControl) request(line string) (string, error) {
	mac := controlMAC(c.key, c.nonce, c.seq, line)
	c.seq++
	return c.send(mac + " " + line)
}

// send sends one line as it is and returns the reply's payload.
func (c *elasticControl) send(line string) (string, error) {
	c.conn.SetDeadline(time.Now().Add(controlTimeout))
	if _, err := io.WriteString(c.conn, line+"\n"); err != nil {
		return "", fmt.Errorf("elastic store control: %w", err)
	}
	reply, err := c.r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("elastic store control: %w", err)
	}
	reply = strings.TrimSuffix(reply, "\n")
	word, rest, _ := strings.Cut(reply, " ")
	switch word {
	case "OK":
		return rest, nil
	case "ERR":
		return "", fmt.Errorf("elastic store: %s: %s", requestName(line), rest)
	}
	return "", fmt.Errorf("elastic store control: unreadable reply %q", reply)
}

// elasticStatus is the STATUS reply.
type elasticStatus struct {
	Epoch      int      `json:"epoch"`
	Members    []string `json:"members"`
	Formed     int      `json:"formed"`
	FormedStep *int     `json:"formed_step"`
	FormedLost *float64 `json:"formed_lost"`
	Fate       string   `json:"fate"` // "", go, abort
	Joined     []string `json:"joined"`
	Failed     []string `json:"failed"`
	Finished   *struct {
		Step int `json:"step"`
	} `json:"finished"`
}

func (c *elasticControl) status() (elasticStatus, error) {
	var s elasticStatus
	out, err := c.request("STATUS")
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		return s, fmt.Errorf("elastic store: STATUS: %w", err)
	}
	return s, nil
}

// elasticWorker is one worker in the WORKERS reply.
type elasticWorker struct {
	Ready *struct {
		PID  int    `json:"pid"`
		Host string `json:"host"`
	} `json:"ready"`
	Left *struct {
		Epoch int `json:"epoch"`
		Step  int `json:"step"`
	} `json:"left"`
}

func (c *elasticControl) workers(ids []string) (map[string]elasticWorker, error) {
	out, err := c.request("WORKERS " + strings.Join(ids, " "))
	if err != nil {
		return nil, err
	}
	var m map[string]elasticWorker
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		return nil, fmt.Errorf("elastic store: WORKERS: %w", err)
	}
	return m, nil
}

// members publishes membership epoch e.
func (c *elasticControl) members(e int, ids []string) error {
	_, err := c.request("MEMBERS " + strconv.Itoa(e) + " " + strings.Join(ids, " "))
	return err
}

// requestName is a request line's verb, past its proof.
func requestName(line string) string {
	f := strings.Fields(line)
	switch {
	case len(f) == 0:
		return "(empty)"
	case len(f) > 1 && len(f[0]) == 64:
		return f[1]
	}
	return f[0]
}
