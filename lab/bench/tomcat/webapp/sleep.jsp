<%@ page contentType="text/plain" session="false" %><%--
  Holds one of the connector's threads for ms milliseconds: a request that
  waits on something slow, and so the shape of the published experiments'
  blocking endpoint. No session: the rig keeps no cookies, and a session
  a request would only fill the heap.
--%><%
String ms = request.getParameter("ms");
long n = ms == null ? 0 : Long.parseLong(ms);
Thread.sleep(n);
%>slept <%= n %> ms
