<%@ page contentType="text/plain" session="false" import="java.io.InputStream,java.net.HttpURLConnection,java.net.URL" %><%--
  Holds one of the connector's threads for a blocking HTTP call to the
  stub's /wait?ms=N, as a servlet calling a downstream API does. The stub's
  address is the loomlab.stub system property the launcher sets. The body
  is read to its end and the stream closed so that HttpURLConnection keeps
  the connection for the next call (up to http.maxConnections of them).
--%><%
String stub = System.getProperty("loomlab.stub");
if (stub == null || stub.isEmpty()) {
    response.sendError(500, "no stub: the loomlab.stub system property is not set");
    return;
}
String ms = request.getParameter("ms");
HttpURLConnection c = (HttpURLConnection) new URL(stub + "/wait?ms=" + (ms == null ? "0" : Long.parseLong(ms))).openConnection();
c.setConnectTimeout(5000);
c.setReadTimeout(60000);
int status = c.getResponseCode();
try (InputStream in = status < 400 ? c.getInputStream() : c.getErrorStream()) {
    if (in != null) {
        in.transferTo(java.io.OutputStream.nullOutputStream());
    }
}
if (status != 200) {
    response.sendError(502, "stub answered " + status);
    return;
}
%>called the stub for <%= ms %> ms
