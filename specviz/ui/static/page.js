() => {
  // Run once the page has loaded (Gradio's launch `js`; a `js` on the button's click did not fire): on ▶ Start race
  // the race comes into view at once, the button row at the top of the screen with the status line, the legend
  // and the columns with their live numbers under it. At 1280 x 720 the controls above would otherwise leave the
  // columns below the first screen, and a projected room would see nothing happen. `__TERMS__` is replaced by the
  // glossary's hover texts (specviz.ui.layout).
  // The presenter view: as the address asks at once (before the page's own load event sets the box), then as
  // the box says, kept in the address so that a reload or a copied link opens the same view.
  var presenting = function (on) {
    document.body.classList.toggle('sv-presenter', !!on);
    var url = new URL(window.location.href);
    if (on) url.searchParams.set('presenter', '1'); else url.searchParams.delete('presenter');
    window.history.replaceState(null, '', url);
  };
  if (['1', 'true', 'yes', 'on'].includes((new URLSearchParams(window.location.search).get('presenter') || '').toLowerCase()))
    document.body.classList.add('sv-presenter');
  document.addEventListener('change', function (e) {
    var box = e.target && e.target.closest && e.target.closest('#sv-presenter');
    if (box && e.target.type === 'checkbox') presenting(e.target.checked);
  }, true);
  // Gradio's own labels (sliders, numbers) get the glossary's definition on hover, as the page's HTML has it.
  var terms = __TERMS__;
  document.addEventListener('mouseover', function (e) {
    var label = e.target && e.target.closest && e.target.closest('label, [data-testid="block-info"], th');
    if (!label || label.title) return;
    var text = (label.innerText || '').trim().toLowerCase().replace(/\s+/g, ' ');   // as glossary.normalized reads it
    var hover = terms[text] || terms[text.replace(/\s+\([^)]*\)\s*$/, '')];
    if (hover) label.title = hover;
  });
  document.addEventListener('click', function (e) {
    var start = e.target && e.target.closest && e.target.closest('#sv-run');
    if (!start) return;
    (start.closest('.row') || start).scrollIntoView({block: 'start', behavior: 'instant'});
  }, true);
}
