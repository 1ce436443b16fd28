"""An object with a file, edited in the admin as any Django site's are."""
from django.db import models


class Attachment(models.Model):
    title = models.CharField(max_length=200)
    file = models.FileField(upload_to="attachments/")

    def __str__(self):
        return self.title
