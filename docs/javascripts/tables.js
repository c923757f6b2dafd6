// A table cell that holds a sentence (more than WORDS_LONG characters) is marked so that it
// wraps (docs/stylesheets/extra.css); every other cell keeps its value on one line. Without
// this script every cell stays on one line and a wide table scrolls.
const WORDS_LONG = 48;
document.querySelectorAll(".md-typeset table:not([class]) td").forEach((cell) => {
  if (cell.textContent.trim().length > WORDS_LONG) cell.dataset.wraps = "";
});
