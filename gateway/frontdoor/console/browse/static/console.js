// The console's only script. It never builds markup from data: the pages
// are rendered and escaped on the server, and this file only refreshes
// the verification page while a verification runs.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var status = document.getElementById("verify-status");
  if (status && status.dataset.running === "yes") {
    window.setTimeout(function () { window.location.reload(); }, 1000);
  }
});
