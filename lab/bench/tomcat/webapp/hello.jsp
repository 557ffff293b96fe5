<%@ page contentType="text/plain" session="false" %>hello
