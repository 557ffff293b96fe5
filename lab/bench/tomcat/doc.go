// Package tomcat runs Apache Tomcat for the lab: a real servlet container
// with its own thread pool (the connector's maxThreads) as the upstream
// behind a sidecar, where the stub's Config.Pool only imitates one.
//
// Start runs Debian's tomcat10 (CATALINA_HOME /usr/share/tomcat10) with
// java, in a CATALINA_BASE of its own in a temporary directory, never the
// system service: one HTTP/1.1 connector on a free loopback port, no AJP
// and no shutdown port, and a ROOT web application of three JSPs, which
// Jasper compiles on their first request (Start sends it):
//
//	/sleep.jsp?ms=N  hold a connector thread N ms (Thread.sleep)
//	/call.jsp?ms=N   hold it for a blocking HTTP call to the stub's
//	                 /wait?ms=N (Config.StubURL), as a servlet calling a
//	                 downstream API does
//	/hello.jsp       answer at once
package tomcat
