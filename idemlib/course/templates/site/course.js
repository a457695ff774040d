/* The course's small fixes to the Book theme, each for a reader (idemlib/course/site.py says why). */
(function () {
  "use strict";
  // A box that scrolls sideways (a plot, a wide table, a step-through picture wider than the screen)
  // can be reached and scrolled from the keyboard, and says what it holds. Only boxes that really
  // overflow at this width become a tab stop, so a wide screen is not full of them.
  var SCROLLERS = "div.cell_output, .table-wrapper";
  function label(box) {
    var image = box.querySelector("img[alt]");
    if (image) return "Figure, scrolls sideways: " + image.getAttribute("alt");
    if (box.querySelector("table")) return "Table, scrolls sideways";
    return "Output, scrolls sideways";
  }
  function markScrollers() {
    document.querySelectorAll(SCROLLERS).forEach(function (box) {
      var overflows = box.scrollWidth > box.clientWidth + 1;
      if (overflows && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", label(box));
        box.dataset.courseScroller = "1";
      } else if (!overflows && box.dataset.courseScroller) {
        ["tabindex", "role", "aria-label", "data-course-scroller"].forEach(function (name) { box.removeAttribute(name); });
      }
    });
  }
  function ready(run) {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", run);
    else run();
  }
  ready(markScrollers);
  window.addEventListener("load", markScrollers);  // images have their size only once loaded
  window.addEventListener("resize", markScrollers);
})();
