from django.http import HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render

from .forms import NoteForm
from .models import Note

BOOM = "django-app-boom-51c9"


def hello(request):
    return HttpResponse("Hello, Django!")


def new_note(request):
    if request.method == "POST":
        form = NoteForm(request.POST)
        if form.is_valid():
            note = form.save()
            return JsonResponse({"id": note.id, "title": note.title}, status=201)
        return JsonResponse({"errors": form.errors}, status=400)
    return render(request, "notes/new.html", {"form": NoteForm()})


def note_detail(request, note_id):
    note = get_object_or_404(Note, pk=note_id)
    return JsonResponse({"id": note.id, "title": note.title, "body": note.body})


def note_count(request):
    return JsonResponse({"count": Note.objects.count()})


def meta(request):
    m = request.META
    keys = ["REQUEST_METHOD", "SCRIPT_NAME", "PATH_INFO", "QUERY_STRING", "SERVER_PROTOCOL",
            "REMOTE_ADDR", "HTTP_HOST", "wsgi.url_scheme"]
    return JsonResponse({**{k: m.get(k) for k in keys}, "path": request.path,
                         "full_path": request.get_full_path(), "secure": request.is_secure(),
                         "uri": request.build_absolute_uri()})


def boom(request):
    raise RuntimeError(BOOM)
