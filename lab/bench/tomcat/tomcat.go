package tomcat

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomgate/loomgate/lab/bench"
)

// Home is where Debian's tomcat10 package installs Tomcat.
const Home = "/usr/share/tomcat10"

// ErrMissing is returned by Available and Start when java or Tomcat is
// not installed.
var ErrMissing = errors.New("tomcat: not installed")

// Config describes one Tomcat.
type Config struct {
	// MaxThreads is the connector's maxThreads: how many requests Tomcat
	// serves at once, the rest waiting in its executor's queue. It must be
	// at least 1.
	MaxThreads int
	// StubURL is the base URL /call.jsp calls, e.g. http://127.0.0.1:8081.
	// If empty, /call.jsp answers 500 and Start does not warm it up.
	StubURL string
	// Home is CATALINA_HOME. If empty, Home.
	Home string
	// Java is the java executable. If empty, java on PATH.
	Java string
	// StartTimeout bounds the start, the JSPs' first compilation included.
	// If zero, 60 s: a JVM and Jasper on two cores shared with other work
	// take several seconds.
	StartTimeout time.Duration
}

// Server is a running Tomcat.
type Server struct {
	// URL is its connector, e.g. http://127.0.0.1:34567, without a path.
	URL string

	proc *bench.Proc
	base string
	log  *lockedBuffer
	once sync.Once
}

//go:embed webapp/*.jsp
var webapp embed.FS

// Available reports whether java and Tomcat are installed: nil when they
// are, otherwise an error wrapping ErrMissing that names the Debian
// packages to install.
func Available() error {
	_, err := locate(Config{})
	return err
}

type paths struct{ java, home string }

func locate(cfg Config) (paths, error) {
	p := paths{java: cfg.Java, home: cfg.Home}
	if p.home == "" {
		p.home = Home
	}
	if p.java == "" {
		p.java = "java"
	}
	java, err := exec.LookPath(p.java)
	if err != nil {
		return p, fmt.Errorf("%w: no java (%v); apt-get install openjdk-17-jre-headless", ErrMissing, err)
	}
	p.java = java
	if _, err := os.Stat(filepath.Join(p.home, "bin", "bootstrap.jar")); err != nil {
		return p, fmt.Errorf("%w: no Tomcat in %s (%v); apt-get install tomcat10", ErrMissing, p.home, err)
	}
	return p, nil
}

// Start starts a Tomcat as cfg says and returns once it answers every JSP,
// each compiled. It fails within cfg.StartTimeout, with the end of
// Tomcat's log in the error.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.MaxThreads < 1 {
		return nil, fmt.Errorf("tomcat: MaxThreads %d: want 1 or more", cfg.MaxThreads)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	p, err := locate(cfg)
	if err != nil {
		return nil, err
	}
	addr, err := bench.FreeAddr()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "loomlab-tomcat-")
	if err != nil {
		return nil, err
	}
	if err := writeBase(base, addr, cfg.MaxThreads); err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	args := []string{
		// One GC thread and the quick compiler only: the JSPs do next to
		// no work, and the two cores are shared with the rig, the stub and
		// the sidecar.
		"-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		// HttpURLConnection keeps 5 idle connections per host by default:
		// /call.jsp under 200 threads would open and close one a call.
		"-Dhttp.maxConnections=1000",
		"-Dloomlab.stub=" + cfg.StubURL,
		"-Dcatalina.home=" + p.home, "-Dcatalina.base=" + base,
		"-Djava.io.tmpdir=" + filepath.Join(base, "temp"),
		"-Djava.util.logging.manager=org.apache.juli.ClassLoaderLogManager",
		"-cp", filepath.Join(p.home, "bin", "bootstrap.jar") + string(os.PathListSeparator) + filepath.Join(p.home, "bin", "tomcat-juli.jar"),
		"org.apache.catalina.startup.Bootstrap", "start",
	}
	log := &lockedBuffer{}
	proc, err := bench.Command{Name: "tomcat", Path: p.java, Args: args, Output: log, Grace: 15 * time.Second}.Start()
	if err != nil {
		os.RemoveAll(base)
		return nil, err
	}
	s := &Server{URL: "http://" + addr, proc: proc, base: base, log: log}
	if err := s.warm(ctx, addr, cfg); err != nil {
		s.Stop()
		return nil, fmt.Errorf("tomcat (maxThreads %d) did not start within %v: %w; its log ends:\n%s", cfg.MaxThreads, cfg.StartTimeout, err, log.tail(2000))
	}
	return s, nil
}

// warm waits for the connector and requests each JSP once: Jasper
// compiles a JSP on its first request, which takes a second or more, and
// that second belongs to no measurement.
func (s *Server) warm(ctx context.Context, addr string, cfg Config) error {
	deadline := time.Now().Add(cfg.StartTimeout)
	if err := s.proc.WaitListening(ctx, addr, cfg.StartTimeout); err != nil {
		return err
	}
	pages := []string{"/hello.jsp", "/sleep.jsp?ms=0"}
	if cfg.StubURL != "" {
		pages = append(pages, "/call.jsp?ms=0")
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for _, page := range pages {
		for {
			err := get(ctx, client, s.URL+page)
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("GET %s: %w", page, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// Stop stops Tomcat (SIGTERM: the JVM's shutdown hook stops the
// connector and the context), waits for it to end, and removes its
// CATALINA_BASE. Stopping twice does nothing.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.proc.Stop()
		os.RemoveAll(s.base)
	})
}

// RSS is the JVM's resident memory.
func (s *Server) RSS() (int64, error) { return s.proc.RSS() }

// Log is what Tomcat has written so far, its standard output and error.
func (s *Server) Log() string { return s.log.String() }

// writeBase lays out a CATALINA_BASE: the configuration, the ROOT web
// application with the JSPs, and the directories Tomcat writes to.
func writeBase(base, addr string, maxThreads int) error {
	host, port, _ := strings.Cut(addr, ":")
	files := map[string]string{
		"conf/server.xml":          serverXML(host, port, maxThreads),
		"conf/web.xml":             webXML,
		"conf/catalina.properties": catalinaProperties,
	}
	jsps, err := webapp.ReadDir("webapp")
	if err != nil {
		return err
	}
	for _, e := range jsps {
		b, err := webapp.ReadFile("webapp/" + e.Name())
		if err != nil {
			return err
		}
		files["webapps/ROOT/"+e.Name()] = string(b)
	}
	for _, dir := range []string{"conf", "logs", "temp", "work", "webapps/ROOT"} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			return err
		}
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(base, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// serverXML is one connector whose pool is the thing measured:
// maxThreads threads, every other request waiting in the executor's queue
// on a connection Tomcat holds open (maxConnections and acceptCount far
// above any load the lab sends, so nothing is refused), keep-alive without
// a cap on requests per connection, as a client pool in front of Tomcat
// would have it. No AJP connector; port -1 disables the shutdown port, so
// SIGTERM is the way to stop it.
func serverXML(host, port string, maxThreads int) string {
	return `<?xml version="1.0" encoding="UTF-8"?>
<Server port="-1" shutdown="SHUTDOWN">
  <Service name="Catalina">
    <Connector address="` + host + `" port="` + port + `" protocol="HTTP/1.1"
               maxThreads="` + strconv.Itoa(maxThreads) + `" minSpareThreads="` + strconv.Itoa(min(maxThreads, 10)) + `"
               maxConnections="10000" acceptCount="10000"
               maxKeepAliveRequests="-1" keepAliveTimeout="120000" connectionTimeout="60000" />
    <Engine name="Catalina" defaultHost="localhost">
      <Host name="localhost" appBase="webapps" unpackWARs="false" autoDeploy="false" />
    </Engine>
  </Service>
</Server>
`
}

// webXML maps *.jsp to Jasper, with development off so that a request
// does not check its JSP's file for changes.
const webXML = `<?xml version="1.0" encoding="UTF-8"?>
<web-app xmlns="https://jakarta.ee/xml/ns/jakartaee" version="6.0" metadata-complete="true">
  <servlet>
    <servlet-name>jsp</servlet-name>
    <servlet-class>org.apache.jasper.servlet.JspServlet</servlet-class>
    <init-param><param-name>development</param-name><param-value>false</param-value></init-param>
    <load-on-startup>3</load-on-startup>
  </servlet>
  <servlet-mapping>
    <servlet-name>jsp</servlet-name>
    <url-pattern>*.jsp</url-pattern>
  </servlet-mapping>
</web-app>
`

// catalinaProperties replaces the defaults to skip scanning every jar for
// TLDs and annotations at start, seconds on a shared core for a web
// application that uses none.
const catalinaProperties = `common.loader="${catalina.base}/lib","${catalina.base}/lib/*.jar","${catalina.home}/lib","${catalina.home}/lib/*.jar"
server.loader=
shared.loader=
tomcat.util.scan.StandardJarScanFilter.jarsToSkip=*.jar
`

// lockedBuffer collects the JVM's output, written from the process's
// copying goroutine and read by Start's error and Log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A Tomcat that logs without end must not fill the rig's memory: keep
	// the last megabyte.
	if l.b.Len() > 1<<20 {
		rest := l.b.Bytes()[l.b.Len()-(1<<19):]
		l.b = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) tail(n int) string {
	s := l.String()
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
