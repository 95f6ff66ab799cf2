// advise report: small progressive enhancements; the page reads the same without them.
(function () {
  "use strict";

  // Copy buttons on fix snippets. The clipboard API can be refused (file:// pages, old
  // browsers): then the snippet is selected so that Ctrl-C works.
  function selectText(node) {
    var range = document.createRange();
    range.selectNodeContents(node);
    var sel = window.getSelection();
    sel.removeAllRanges();
    sel.addRange(range);
  }
  function flash(button, text) {
    var old = button.textContent;
    button.textContent = text;
    setTimeout(function () { button.textContent = old; }, 1200);
  }
  document.querySelectorAll(".snippet .copy").forEach(function (button) {
    button.addEventListener("click", function () {
      var pre = button.closest(".snippet").querySelector("pre");
      var text = pre.textContent;
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(
          function () { flash(button, "copied"); },
          function () { selectText(pre); flash(button, "selected"); }
        );
      } else {
        selectText(pre);
        flash(button, "selected");
      }
    });
  });

  // On paper every collapsed section is shown; afterwards they fold back as they were.
  var opened = [];
  window.addEventListener("beforeprint", function () {
    opened = [];
    document.querySelectorAll("details:not([open])").forEach(function (d) {
      d.open = true;
      opened.push(d);
    });
  });
  window.addEventListener("afterprint", function () {
    opened.forEach(function (d) { d.open = false; });
    opened = [];
  });
})();
