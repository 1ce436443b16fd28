from django.contrib import admin

from .models import Attachment

admin.site.register(Attachment)
