from django.shortcuts import render

from gpurental.catalog.selectors import catalog_rows


def home(request):
    return render(request, "console/home.html", {"rows": catalog_rows()})
