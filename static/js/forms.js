// Behaviour of forms, declared in data- attributes and read here (no inline handlers, so
// that a name in a message can never become script, and a strict CSP holds):
//   data-confirm="text"        ask before submitting; the text is shown as text
//   data-autosubmit            on a field: submit its form when it changes
//   data-once                  on a submit button: disabled once its form is sent
document.addEventListener("submit", (event) => {
  const form = event.target;
  if (form.dataset.confirm !== undefined && !window.confirm(form.dataset.confirm)) {
    event.preventDefault();
    return;
  }
  const button = event.submitter;
  if (button && button.dataset.once !== undefined) {
    // After the submission has started, so the button's own name/value is still sent.
    setTimeout(() => { button.disabled = true; }, 0);
  }
});
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field.dataset && field.dataset.autosubmit !== undefined && field.form) field.form.submit();
});
